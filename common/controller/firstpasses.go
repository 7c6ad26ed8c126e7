package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// ListKeys lists the keys of the objects a controller takes (those its
// predicates let through), read from the manager's cache.
type ListKeys func(ctx context.Context) ([]types.NamespacedName, error)

// KeysOf returns a ListKeys that lists the objects of newList's kind from
// r (the manager's cached client) and keeps those takes accepts (nil keeps
// all).
func KeysOf(r client.Reader, newList func() client.ObjectList, takes func(client.Object) bool) ListKeys {
	return func(ctx context.Context) ([]types.NamespacedName, error) {
		l := newList()
		if err := r.List(ctx, l); err != nil {
			return nil, err
		}
		var keys []types.NamespacedName
		err := meta.EachListItem(l, func(o runtime.Object) error {
			obj, ok := o.(client.Object)
			if !ok {
				return fmt.Errorf("list item %T is no client.Object", o)
			}
			if takes == nil || takes(obj) {
				keys = append(keys, client.ObjectKeyFromObject(obj))
			}
			return nil
		})
		return keys, err
	}
}

// FirstPasses tells when every object that existed as a process's
// controllers started has had a pass in that process. An operator that
// learns what its objects claim only from their passes (claims kept in
// memory, as when several objects may want one external record) cannot
// tell, before then, whether an object it has not seen yet claims what a
// deletion would remove: it can hold such deletions until Done.
//
// Give it to the Options of each controller whose objects count, Track
// their kinds, and add it to the manager (it is a leader-election runnable,
// as the controllers are). Any end of a pass counts, failed or blocked
// included, as does the pass that finds the object gone: a pass that
// failed before it told the operator its claims leaves them unknown.
//
// Events go before the initial list in controller-runtime's priority
// queue, so a stream of events can hold first passes back; a FirstPasses
// with a maximum wait is done when it runs out, whatever is left, so that
// what waits for it is delayed, never held for good.
type FirstPasses struct {
	done    chan struct{}
	settled atomic.Bool
	maxWait time.Duration

	mu     sync.Mutex
	kinds  []trackedKind
	listed bool
	// passed holds the passes that ended before the kinds were listed.
	passed map[passKey]struct{}
	// pending holds the listed objects whose pass has not ended yet.
	pending map[passKey]struct{}
}

type trackedKind struct {
	controller string
	list       ListKeys
}

type passKey struct {
	controller string
	key        types.NamespacedName
}

// NewFirstPasses returns a FirstPasses that tracks no kind yet and is done
// at the latest maxWait after Start (zero or negative: no limit).
func NewFirstPasses(maxWait time.Duration) *FirstPasses {
	return &FirstPasses{done: make(chan struct{}), passed: map[passKey]struct{}{}, maxWait: maxWait}
}

// Track adds the objects of the controller named controller, as list
// reads them when Start runs, to those whose first pass Done waits for.
// Call it before the manager starts.
func (f *FirstPasses) Track(controller string, list ListKeys) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kinds = append(f.kinds, trackedKind{controller: controller, list: list})
}

// Passed records that a pass of key by the controller named controller
// ended. The Controller calls it at the end of each Reconcile when its
// Options name f; it is a no-op on a nil FirstPasses and, once Done is
// closed, costs one atomic load.
func (f *FirstPasses) Passed(controller string, key types.NamespacedName) {
	if f == nil || f.settled.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := passKey{controller: controller, key: key}
	if !f.listed {
		f.passed[k] = struct{}{}
		return
	}
	delete(f.pending, k)
	f.settleIfDone()
}

// Start lists the tracked kinds (the manager starts leader-election
// runnables once its caches synced) and returns; Done is closed when each
// listed object has had a pass, at once when none was listed, or when the
// maximum wait runs out (logged, with how many were left). A list that
// fails fails Start, and with it the manager.
func (f *FirstPasses) Start(ctx context.Context) error {
	f.mu.Lock()
	kinds := append([]trackedKind(nil), f.kinds...)
	f.mu.Unlock()
	pending := map[passKey]struct{}{}
	for _, k := range kinds {
		keys, err := k.list(ctx)
		if err != nil {
			return fmt.Errorf("list the objects of %s awaiting their first pass: %w", k.controller, err)
		}
		for _, key := range keys {
			pending[passKey{controller: k.controller, key: key}] = struct{}{}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.passed {
		delete(pending, k)
	}
	f.passed, f.pending, f.listed = nil, pending, true
	f.settleIfDone()
	if f.maxWait > 0 && !f.settled.Load() {
		go f.giveUpAfter(ctx, f.maxWait)
	}
	return nil
}

// giveUpAfter closes done after wait unless it closed before or ctx ended.
func (f *FirstPasses) giveUpAfter(ctx context.Context, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-f.done:
		return
	case <-t.C:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if left := len(f.pending); left > 0 {
		logf.FromContext(ctx).Info("stopped waiting for the first passes of the objects present at the start",
			"waited", wait, "withoutPass", left)
	}
	f.pending = nil
	f.settleIfDone()
}

// Done is closed once every object Start listed has had a pass.
func (f *FirstPasses) Done() <-chan struct{} { return f.done }

// Waiting returns how many listed objects have not had their pass yet
// (zero before Start too).
func (f *FirstPasses) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// settleIfDone closes done when nothing is pending. Call it with f.mu held.
func (f *FirstPasses) settleIfDone() {
	if len(f.pending) > 0 || f.settled.Load() {
		return
	}
	f.pending = nil
	f.settled.Store(true)
	close(f.done)
}
