package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// Notifier turns the entry syncer's notifications into reconcile requests
// for the owner's controller, without blocking the notifying pass.
type Notifier struct {
	chans map[string]chan event.TypedGenericEvent[reconcile.Request]
}

// NewNotifier returns a Notifier for the given kinds.
func NewNotifier(kinds ...string) *Notifier {
	n := &Notifier{chans: map[string]chan event.TypedGenericEvent[reconcile.Request]{}}
	for _, k := range kinds {
		n.chans[k] = make(chan event.TypedGenericEvent[reconcile.Request], 1024)
	}
	return n
}

// Notify asks for a pass of o; it is an entrysync.Options.Notify.
func (n *Notifier) Notify(o entrysync.Owner) {
	ch, ok := n.chans[o.Kind]
	if !ok {
		return
	}
	ev := event.TypedGenericEvent[reconcile.Request]{Object: reconcile.Request{NamespacedName: types.NamespacedName{Name: o.Name}}}
	select {
	case ch <- ev:
	default:
		go func() { ch <- ev }()
	}
}

// source returns the controller-runtime source of kind's notifications.
func (n *Notifier) source(kind string) source.Source {
	return source.Channel(n.chans[kind], handler.TypedFuncs[reconcile.Request, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[reconcile.Request], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(e.Object)
		},
	})
}
