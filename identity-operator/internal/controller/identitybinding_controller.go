package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/boundary"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// Name is the controller name used in logs, events and metrics.
const Name = "identitybinding"

// +kubebuilder:rbac:groups=identity.trustplane.dev,resources=identitybindings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=identity.trustplane.dev,resources=identitybindings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=identity.trustplane.dev,resources=identitybindings/finalizers,verbs=update
// +kubebuilder:rbac:groups=spiffe.trustplane.dev,resources=spiffeentries,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=spire.spiffe.io,resources=clusterspiffeids,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=inference.networking.k8s.io,resources=inferencepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=inferencepools.inference.networking.k8s.io,verbs=get
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,resourceNames=identity-boundary.trustplane.dev;identity-boundary-immutable.trustplane.dev;identity-boundary-workloads.trustplane.dev,verbs=get
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The metrics endpoint's guard (common/metricsauth) reviews each scraper's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=selfsubjectaccessreviews,verbs=create

// SetupOptions configure Setup.
type SetupOptions struct {
	// TrustDomain renders SPIFFE IDs for the SPIFFE ID index.
	TrustDomain spiffeid.TrustDomain
	// Outputs are the configured output kinds; Setup fails when the CRD of
	// one of them is not served.
	Outputs []output.Kind
	// ServedOutputs are the known output kinds whose CRD is served
	// (ServedOutputKinds); they are watched and swept. Empty means Outputs.
	ServedOutputs []output.Kind
	// OrphanSweepInterval is how often outputs whose owner binding is gone
	// are deleted; 0 means DefaultOrphanSweepInterval.
	OrphanSweepInterval time.Duration
	// CRDPollInterval is how often the operator checks whether the
	// InferencePool CRD has been installed, while it is missing, and reads
	// it to see whether it still serves v1 (CRDServing); 0 means
	// DefaultCRDPollInterval.
	CRDPollInterval time.Duration
	// CRDServing, when set, is kept up to date by reading the InferencePool
	// CRD every CRDPollInterval while the operator runs (give the same one
	// to the handler): a CRD deleted, or no longer serving v1, is noticed
	// without a restart.
	CRDServing *pool.Serving
	// Boundary, when set, is kept up to date by reading the identity
	// boundary's admission policies every CRDPollInterval (give the same
	// one to the handler, which reports it on every binding).
	Boundary *boundary.State
}

// Setup registers the indexes and the controller c with mgr. It fails with
// a clear error when the CRD of a configured output kind is not installed.
// A missing InferencePool CRD is not an error: bindings report it, and a
// runnable adds the InferencePool watch to the running controller once the
// CRD is installed, so no restart is needed.
func Setup(ctx context.Context, mgr ctrl.Manager, c *controller.Controller[*v1alpha1.IdentityBinding], opts SetupOptions) error {
	if err := index.Register(ctx, mgr.GetFieldIndexer(), opts.TrustDomain); err != nil {
		return err
	}
	for _, k := range opts.Outputs {
		gvk := k.GVK()
		ok, err := crdInstalled(mgr.GetRESTMapper(), gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("output %s needs the %s CRD (%s), which is not installed: install it or choose another --output", k, gvk.Kind, gvk.GroupVersion())
		}
	}
	m := &mapper{client: mgr.GetClient(), td: opts.TrustDomain}
	inferencePools, err := crdInstalled(mgr.GetRESTMapper(), pool.InferencePoolGVK().GroupKind(), pool.InferencePoolGVK().Version)
	if err != nil {
		return err
	}
	newObject := func() *v1alpha1.IdentityBinding { return &v1alpha1.IdentityBinding{} }
	b := controller.NewBuilder(mgr, c, newObject).
		Watches(&v1alpha1.IdentityBinding{}, &peerHandler{m: m}).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(m.poolBindings(v1alpha1.AppsGroup, v1alpha1.DeploymentKind))).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(m.poolBindings(v1alpha1.AppsGroup, v1alpha1.StatefulSetKind)))
	if inferencePools {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(pool.InferencePoolGVK())
		b = b.Watches(u, handler.EnqueueRequestsFromMapFunc(m.poolBindings(v1alpha1.InferencePoolGroup, v1alpha1.InferencePoolKind)))
	}
	served := opts.ServedOutputs
	if len(served) == 0 {
		served = opts.Outputs
	}
	for _, k := range served {
		switch k {
		case output.KindSpiffeEntry:
			b = b.Watches(&spiffev1alpha1.SpiffeEntry{}, handler.EnqueueRequestsFromMapFunc(m.outputBindings))
		case output.KindClusterSPIFFEID:
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
			b = b.Watches(u, handler.EnqueueRequestsFromMapFunc(m.outputBindings))
		}
	}
	interval := opts.CRDPollInterval
	if interval <= 0 {
		interval = DefaultCRDPollInterval
	}
	// polled carries the bindings a monitor's read concerns.
	var polled chan event.TypedGenericEvent[*v1alpha1.IdentityBinding]
	if opts.CRDServing != nil || opts.Boundary != nil {
		polled = make(chan event.TypedGenericEvent[*v1alpha1.IdentityBinding])
		b = b.WatchesRawSource(source.Channel(polled, &handler.TypedEnqueueRequestForObject[*v1alpha1.IdentityBinding]{}))
	}
	ctl, err := b.Build(&controller.Reconciler[*v1alpha1.IdentityBinding]{Controller: c, NewObject: newObject})
	if err != nil {
		return fmt.Errorf("build controller %s: %w", c.Name(), err)
	}
	if opts.CRDServing != nil {
		log := mgr.GetLogger().WithValues("controller", c.Name(), "runnable", "inferencepool-crd-monitor")
		if err := mgr.Add(newCRDMonitor(mgr.GetAPIReader(), mgr.GetClient(), opts.CRDServing, polled, interval, log)); err != nil {
			return fmt.Errorf("add the InferencePool CRD monitor: %w", err)
		}
	}
	if opts.Boundary != nil {
		log := mgr.GetLogger().WithValues("controller", c.Name(), "runnable", "boundary-policy-monitor")
		if err := mgr.Add(newBoundaryMonitor(mgr.GetAPIReader(), mgr.GetClient(), opts.Boundary, polled, interval, log)); err != nil {
			return fmt.Errorf("add the boundary policy monitor: %w", err)
		}
	}
	if err := mgr.Add(&orphanSweeper{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		kinds:     served,
		interval:  opts.OrphanSweepInterval,
		log:       mgr.GetLogger().WithValues("controller", c.Name(), "runnable", "orphan-sweep"),
	}); err != nil {
		return fmt.Errorf("add the orphan sweep: %w", err)
	}
	if inferencePools {
		return nil
	}
	log := mgr.GetLogger().WithValues("controller", c.Name())
	log.Info("InferencePool CRD not installed: bindings to InferencePools report InferencePoolCRDMissing until it is; the operator checks for it periodically and starts watching InferencePools once it is installed, no restart needed",
		"gvk", pool.InferencePoolGVK().String(), "interval", interval)
	w := &poolWatcher{
		restMapper: mgr.GetRESTMapper(),
		cache:      mgr.GetCache(),
		controller: ctl,
		bindings:   m,
		interval:   interval,
		log:        log,
	}
	if err := mgr.Add(w); err != nil {
		return fmt.Errorf("add the InferencePool CRD watcher: %w", err)
	}
	return nil
}

// ServedOutputKinds returns the known output kinds whose CRD the API server
// serves.
func ServedOutputKinds(rm meta.RESTMapper) ([]output.Kind, error) {
	var out []output.Kind
	for _, k := range output.Kinds() {
		gvk := k.GVK()
		ok, err := crdInstalled(rm, gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, k)
		}
	}
	return out, nil
}

// crdInstalled reports whether the API server serves gk in version. The
// manager's RESTMapper asks discovery again for a kind it does not know, so
// it notices a CRD installed after startup.
func crdInstalled(rm meta.RESTMapper, gk schema.GroupKind, version string) (bool, error) {
	_, err := rm.RESTMapping(gk, version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("look up %s: %w", gk, err)
}

// mapper finds the bindings an event concerns, through the cache indexes.
type mapper struct {
	client client.Reader
	td     spiffeid.TrustDomain
}

// peers returns b's group peers and same-SPIFFE-ID peers, each once, b
// left out: the binding's own watch queues b for every change peerHandler
// acts on (see peerHandler), and a second addition from this handler's own
// event delivery, a moment later, would start a second pass of b once the
// first had taken it from the queue.
func (m *mapper) peers(ctx context.Context, b *v1alpha1.IdentityBinding) []reconcile.Request {
	self := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
	reqs := m.byGroup(ctx, b.Namespace, index.GroupKey(b.Namespace, b.Spec.ServiceAccountName, b.Spec.IdentityBoundary.Variant))
	if id, ok := index.SPIFFEID(m.td, b); ok {
		reqs = append(reqs, m.byField(ctx, index.FieldSPIFFEID, index.IDKey(id))...)
	}
	seen := map[types.NamespacedName]struct{}{self: {}}
	out := reqs[:0]
	for _, r := range reqs {
		if _, dup := seen[r.NamespacedName]; dup {
			continue
		}
		seen[r.NamespacedName] = struct{}{}
		out = append(out, r)
	}
	return out
}

func (m *mapper) byGroup(ctx context.Context, namespace, key string) []reconcile.Request {
	return m.list(ctx, client.InNamespace(namespace), client.MatchingFields{index.FieldGroup: key})
}

func (m *mapper) byField(ctx context.Context, field, key string) []reconcile.Request {
	return m.list(ctx, client.MatchingFields{field: key})
}

func (m *mapper) list(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var l v1alpha1.IdentityBindingList
	if err := m.client.List(ctx, &l, opts...); err != nil {
		logf.FromContext(ctx).Error(err, "list bindings to requeue")
		return nil
	}
	reqs := make([]reconcile.Request, len(l.Items))
	for i := range l.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.Items[i].Namespace, Name: l.Items[i].Name}}
	}
	return reqs
}

// poolBindings maps a pool event to the bindings that reference the pool.
func (m *mapper) poolBindings(group, kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		key := index.PoolKey(v1alpha1.PoolReference{Group: group, Kind: kind, Name: o.GetName()})
		return m.list(ctx, client.InNamespace(o.GetNamespace()), client.MatchingFields{index.FieldPool: key})
	}
}

// outputBindings maps an output event to its owner and to the bindings that
// may be waiting for it to go: those of its group and SPIFFE ID.
func (m *mapper) outputBindings(ctx context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	var reqs []reconcile.Request
	if key, _, ok := labels.OwnerOfObject(o, ownerKind); ok && key.Namespace != "" {
		reqs = append(reqs, reconcile.Request{NamespacedName: key})
		if g := l[index.LabelGroup]; g != "" {
			reqs = append(reqs, m.byGroup(ctx, key.Namespace, g)...)
		}
	}
	if id := l[index.LabelSPIFFEID]; id != "" {
		reqs = append(reqs, m.byField(ctx, index.FieldSPIFFEID, id)...)
	}
	return reqs
}

// peerHandler requeues the group peers of a binding that was created,
// deleted, or changed in a way the conflict rules see (spec, deletion,
// environment label), before and after the change. It leaves the binding
// itself to its own watch, whose predicate (controller.OwnWritesDropped)
// passes every one of those events: creations, deletions, and updates that
// change the generation, the labels or the deletion mark.
type peerHandler struct{ m *mapper }

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (h *peerHandler) add(ctx context.Context, q queue, o client.Object) {
	b, ok := o.(*v1alpha1.IdentityBinding)
	if !ok {
		return
	}
	for _, r := range h.m.peers(ctx, b) {
		q.Add(r)
	}
}

// Create implements handler.EventHandler.
func (h *peerHandler) Create(ctx context.Context, e event.CreateEvent, q queue) {
	h.add(ctx, q, e.Object)
}

// Update implements handler.EventHandler.
func (h *peerHandler) Update(ctx context.Context, e event.UpdateEvent, q queue) {
	o, n := e.ObjectOld, e.ObjectNew
	if o.GetGeneration() == n.GetGeneration() && (o.GetDeletionTimestamp() == nil) == (n.GetDeletionTimestamp() == nil) &&
		o.GetLabels()[labels.Environment] == n.GetLabels()[labels.Environment] {
		return
	}
	h.add(ctx, q, o)
	h.add(ctx, q, n)
}

// Delete implements handler.EventHandler.
func (h *peerHandler) Delete(ctx context.Context, e event.DeleteEvent, q queue) {
	h.add(ctx, q, e.Object)
}

// Generic implements handler.EventHandler.
func (h *peerHandler) Generic(ctx context.Context, e event.GenericEvent, q queue) {
	h.add(ctx, q, e.Object)
}
