package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	crhandler "sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/object"
)

// Reconciler adapts a Controller to reconcile.Reconciler, giving each pass a
// fresh object from newObject.
type Reconciler[T object.Object] struct {
	Controller *Controller[T]
	NewObject  func() T
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler[T]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return r.Controller.Reconcile(ctx, req, r.NewObject())
}

// NewBuilder returns a controller-runtime builder for kind T, named after the
// controller, with the configured MaxConcurrentReconciles and a per-item
// exponential rate limiter from requeue-after-on-error to max-backoff. T's
// watch drops the updates that change neither spec nor metadata
// (SpecOrMetadataChanged): the Controller's own status writes and finalizer,
// which would otherwise start a second pass after every pass that wrote
// them. Its work queue counts each object's events, for StatusMayWait; a
// later WithOptions on the builder replaces that queue, and the Controller
// then holds no status back. Add Owns and Watches to it and finish with
// Complete(&Reconciler{...}), or use SetupWithManager. forOpts (e.g.
// builder.WithPredicates) apply to T's watch as well.
func NewBuilder[T object.Object](mgr ctrl.Manager, c *Controller[T], newObject func() T, forOpts ...builder.ForOption) *builder.Builder {
	cfg := c.opts.Config
	forOpts = append([]builder.ForOption{builder.WithPredicates(OwnWritesDropped())}, forOpts...)
	return ctrl.NewControllerManagedBy(mgr).
		For(newObject(), forOpts...).
		Named(c.name).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: cfg.MaxConcurrentReconciles,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				cfg.RequeueAfterOnError, cfg.MaxBackoff),
			// controller-runtime's priority queue (its default), counting
			// the events of each object for StatusMayWait.
			NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
				c.events.counting.Store(true)
				q := countingQueue{counts: c.events, PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
					o.Log = mgr.GetLogger().WithValues("controller", name)
					o.RateLimiter = rl
				})}
				c.behind.setQueue(q)
				return q
			},
		})
}

// SetupWithManager registers c with mgr. customize, when not nil, adds Owns
// and Watches to the builder; forOpts apply to T's watch.
func SetupWithManager[T object.Object](mgr ctrl.Manager, c *Controller[T], newObject func() T, customize func(*builder.Builder) *builder.Builder, forOpts ...builder.ForOption) error {
	if err := object.StatusInPlace(newObject()); err != nil {
		return fmt.Errorf("controller %s: %w", c.name, err)
	}
	b := NewBuilder(mgr, c, newObject, forOpts...)
	if customize != nil {
		b = customize(b)
	}
	return b.Complete(&Reconciler[T]{Controller: c, NewObject: newObject})
}

// EnqueueOwnerByLabels maps the events of a child to its owner of kind by
// the owner labels the janitor writes on every child (labels.OwnerOfObject).
// builder.Owns follows owner references, which Kubernetes allows only in a
// namespaced owner's own namespace; watch the children an owner keeps in
// other namespaces with it, so that one deleted or edited by hand is
// repaired at once rather than at the next requeue:
// b.Watches(&corev1.ConfigMap{}, controller.EnqueueOwnerByLabels("Widget")).
func EnqueueOwnerByLabels(kind string) crhandler.EventHandler {
	return crhandler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		key, _, ok := labels.OwnerOfObject(obj, kind)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: key}}
	})
}

// LabelsOrDeletionChanged passes creations, deletions, and the updates that
// change an object's labels or whether it is being deleted: what can change
// a label selection (a namespace's labels, say). Other updates are dropped.
func LabelsOrDeletionChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
			(e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil)
	}}
}

// OwnWritesDropped passes creations, deletions and the updates for which
// SpecOrMetadataChanged is true; NewBuilder puts it on the reconciled
// kind's watch.
func OwnWritesDropped() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return SpecOrMetadataChanged(e.ObjectOld, e.ObjectNew)
	}}
}

// SpecOrMetadataChanged reports whether an update of an object the
// Controller reconciles changed more than its status: the generation (the
// spec), labels, annotations, finalizers or the deletion mark. Use it to
// drop the events of the Controller's own status writes. The Controller's
// own finalizer being added is not a change either: the Controller adds it
// at the start of an object's first pass, which then reconciles the very
// object it patched (a patch that conflicts re-reads it), so the event would
// only cost a second pass, for a large object a full one. Any other change
// made at the same time, the finalizer taken off, or other finalizers
// changed, counts.
func SpecOrMetadataChanged(before, after client.Object) bool {
	return before.GetGeneration() != after.GetGeneration() ||
		!maps.Equal(before.GetLabels(), after.GetLabels()) ||
		!maps.Equal(before.GetAnnotations(), after.GetAnnotations()) ||
		!(slices.Equal(before.GetFinalizers(), after.GetFinalizers()) || ownFinalizerAdded(before.GetFinalizers(), after.GetFinalizers())) ||
		(before.GetDeletionTimestamp() == nil) != (after.GetDeletionTimestamp() == nil)
}

// ownFinalizerAdded reports whether after is before with labels.Finalizer
// appended, as the Controller's patch adds it.
func ownFinalizerAdded(before, after []string) bool {
	return !slices.Contains(before, labels.Finalizer) && len(after) == len(before)+1 &&
		after[len(before)] == labels.Finalizer && slices.Equal(before, after[:len(before)])
}
