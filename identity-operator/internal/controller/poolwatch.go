package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// DefaultCRDPollInterval is how often the operator checks whether the
// InferencePool CRD has been installed, while it is missing, and whether it
// still serves v1 InferencePools, while the operator runs.
const DefaultCRDPollInterval = 30 * time.Second

// poolWatcher is a manager runnable, added when the InferencePool CRD is
// missing at startup. It asks the manager's RESTMapper every interval whether
// the API server serves InferencePools; the first time it does, it adds the
// InferencePool watch to the running controller, then returns; once the new
// informer has synced, every binding whose poolRef names an InferencePool
// is requeued. The RESTMapper does not
// cache a missing kind: for a lookup with a version it asks discovery for
// that group version again (one request per check while the CRD is missing).
type poolWatcher struct {
	restMapper meta.RESTMapper
	cache      cache.Cache
	controller crcontroller.Controller
	bindings   *mapper
	interval   time.Duration
	log        logr.Logger

	// mu guards watching: the watch is added exactly once.
	mu       sync.Mutex
	watching bool
}

// Start implements manager.Runnable. It returns nil once the watch is added
// or ctx ends; a failed check is logged and tried again at the next tick.
func (w *poolWatcher) Start(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, w.interval, true, func(ctx context.Context) (bool, error) {
		ok, err := w.ensureWatch(ctx)
		if err != nil {
			w.log.Error(err, "check for the InferencePool CRD; trying again", "interval", w.interval)
			return false, nil
		}
		return ok, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("wait for the InferencePool CRD: %w", err)
	}
	return nil
}

// ensureWatch adds the InferencePool watch if the CRD is served and the
// watch was not added yet. It reports whether the watch is in place.
func (w *poolWatcher) ensureWatch(ctx context.Context) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watching {
		return true, nil
	}
	gvk := pool.InferencePoolGVK()
	served, err := crdInstalled(w.restMapper, gvk.GroupKind(), gvk.Version)
	if err != nil || !served {
		return false, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	src := source.Kind[client.Object](w.cache, u,
		handler.EnqueueRequestsFromMapFunc(w.bindings.poolBindings(v1alpha1.InferencePoolGroup, v1alpha1.InferencePoolKind)))
	if err := w.controller.Watch(src); err != nil {
		return false, fmt.Errorf("watch InferencePools: %w", err)
	}
	w.watching = true
	w.log.Info("InferencePool CRD installed: watching InferencePools now; the bindings that reference one are requeued once the informer has synced",
		"gvk", gvk.String())
	// The pools' initial add events requeue the bindings of existing pools;
	// this source requeues them all once the informer has synced, so no
	// binding keeps reporting InferencePoolCRDMissing until its slow retry
	// (its pool does not exist yet), nor PoolCacheNotSynced until its next
	// backoff (a pass ran before the informer's first list completed).
	if err := w.controller.Watch(source.Func(func(ctx context.Context, q queue) error {
		return w.bindings.requeueOnceSynced(ctx, w.cache, u, q)
	})); err != nil {
		w.log.Error(err, "requeue the bindings that reference an InferencePool; they converge at their next retry")
	}
	return true, nil
}

// requeueOnceSynced waits, in a goroutine of its own, until the informer
// of informers for u's kind has synced (or ctx ends), then requeues every
// binding whose poolRef names an InferencePool.
func (m *mapper) requeueOnceSynced(ctx context.Context, informers pool.InformerGetter, u *unstructured.Unstructured, q queue) error {
	inf, err := informers.GetInformer(ctx, u, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for InferencePools: %w", err)
	}
	go func() {
		select {
		case <-inf.HasSyncedChecker().Done():
		case <-ctx.Done():
		}
		if ctx.Err() == nil {
			m.inferencePoolBindings(ctx, q)
		}
	}()
	return nil
}

// inferencePoolBindings adds every binding whose poolRef names an
// InferencePool to q. A failed list is logged: those bindings still
// converge at their next retry.
func (m *mapper) inferencePoolBindings(ctx context.Context, q queue) {
	bindings, err := inferencePoolBindingsIn(ctx, m.client)
	if err != nil {
		logf.FromContext(ctx).Error(err, "list bindings to requeue after the InferencePool CRD was installed")
		return
	}
	for _, b := range bindings {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
	}
}

// inferencePoolBindingsIn lists, through r, the bindings whose poolRef
// names an InferencePool.
func inferencePoolBindingsIn(ctx context.Context, r client.Reader) ([]*v1alpha1.IdentityBinding, error) {
	var l v1alpha1.IdentityBindingList
	if err := r.List(ctx, &l); err != nil {
		return nil, fmt.Errorf("list bindings: %w", err)
	}
	var out []*v1alpha1.IdentityBinding
	for i := range l.Items {
		ref := l.Items[i].Spec.PoolRef.Resolved()
		if ref.Group == v1alpha1.InferencePoolGroup && ref.Kind == v1alpha1.InferencePoolKind {
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}
