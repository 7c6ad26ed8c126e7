package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// Notifier turns the entry syncer's notifications into reconcile requests
// for the owner's controller, without blocking the notifying pass. Pending
// notifications are a set of owner names per kind, so a flood costs memory
// in the number of distinct owners and no goroutine.
type Notifier struct {
	kinds map[string]*pending
}

// pending holds the owners of one kind notified since the source last
// drained them; wake (capacity 1) tells the source there are some.
type pending struct {
	mu    sync.Mutex
	names map[string]struct{}
	wake  chan struct{}
}

// NewNotifier returns a Notifier for the given kinds.
func NewNotifier(kinds ...string) *Notifier {
	n := &Notifier{kinds: map[string]*pending{}}
	for _, k := range kinds {
		n.kinds[k] = &pending{names: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	}
	return n
}

// Notify asks for a pass of o; it is an entrysync.Options.Notify. It never
// blocks; owners of a kind the Notifier was not made for are ignored.
func (n *Notifier) Notify(o entrysync.Owner) {
	p, ok := n.kinds[o.Kind]
	if !ok {
		return
	}
	p.mu.Lock()
	p.names[o.Name] = struct{}{}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // a wake-up is pending already; it drains this name too
	}
}

// take returns the pending names and forgets them.
func (p *pending) take() map[string]struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := p.names
	p.names = map[string]struct{}{}
	return names
}

// source returns the controller-runtime source of kind's notifications: it
// adds the pending owners to the queue whenever there are some, until the
// controller stops.
func (n *Notifier) source(kind string) source.Source {
	p := n.kinds[kind]
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-p.wake:
				}
				for name := range p.take() {
					q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
				}
			}
		}()
		return nil
	})
}
