package controller

import (
	"context"
	"maps"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
// exponential rate limiter from requeue-after-on-error to max-backoff. Add
// Owns and Watches to it and finish with Complete(&Reconciler{...}), or use
// SetupWithManager. forOpts (e.g. builder.WithPredicates) apply to T's watch.
func NewBuilder[T object.Object](mgr ctrl.Manager, c *Controller[T], newObject func() T, forOpts ...builder.ForOption) *builder.Builder {
	cfg := c.opts.Config
	return ctrl.NewControllerManagedBy(mgr).
		For(newObject(), forOpts...).
		Named(c.name).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: cfg.MaxConcurrentReconciles,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				cfg.RequeueAfterOnError, cfg.MaxBackoff),
		})
}

// SetupWithManager registers c with mgr. customize, when not nil, adds Owns
// and Watches to the builder; forOpts apply to T's watch.
func SetupWithManager[T object.Object](mgr ctrl.Manager, c *Controller[T], newObject func() T, customize func(*builder.Builder) *builder.Builder, forOpts ...builder.ForOption) error {
	b := NewBuilder(mgr, c, newObject, forOpts...)
	if customize != nil {
		b = customize(b)
	}
	return b.Complete(&Reconciler[T]{Controller: c, NewObject: newObject})
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
