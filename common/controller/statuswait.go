package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// StatusMayWait tells the Controller running this pass that the status the
// handler sets records nothing a later pass needs: counts, conditions and
// messages only, no state such as what the pass wrote outside the cluster.
// The Controller may then hold the status back for up to StatusWaitDelay:
// a pass that an event of the object starts meanwhile computes the status
// anew and writes it, and if none comes, the held status is written when
// the delay is over, without calling the handler. A status so waits for
// one delay at most, and the pass after one that waited writes its own. A
// handler whose pass wrote outside the cluster must not call it. Outside a
// Controller's pass it does nothing.
func StatusMayWait(ctx context.Context) {
	if n, ok := ctx.Value(passNotesKey{}).(*PassNotes); ok {
		n.statusMayWait = true
	}
}

// StatusWaitDelay is how long a status that may wait is held back at most.
const StatusWaitDelay = 200 * time.Millisecond

// PassNotes is what a handler told the Controller during one pass.
type PassNotes struct {
	statusMayWait bool
	// since is the count of the object's events when the pass began.
	since uint64
	// afterWait is set when the object's status was held back by the pass
	// before: this pass writes its own.
	afterWait bool
}

// StatusMayWait reports whether the handler called StatusMayWait.
func (n *PassNotes) StatusMayWait() bool { return n.statusMayWait }

type passNotesKey struct{}

// WithPassNotes returns a context in which a handler's notes (such as
// StatusMayWait) are kept in the returned PassNotes. The Controller gives
// one to each pass; a handler's tests use it to read what a pass noted.
func WithPassNotes(ctx context.Context) (context.Context, *PassNotes) {
	n := &PassNotes{}
	return context.WithValue(ctx, passNotesKey{}, n), n
}

func passNotesOf(ctx context.Context) *PassNotes {
	if n, ok := ctx.Value(passNotesKey{}).(*PassNotes); ok {
		return n
	}
	return &PassNotes{}
}

// heldStatus is a status a pass held back: the object with that status,
// the object as the pass read it, the count of the object's events when
// that pass began, and the result the pass would have returned.
type heldStatus struct {
	obj, orig client.Object
	since     uint64
	res       ctrl.Result
}

// eventCounts counts, per object, the additions to the work queue that
// make a pass due at once (an event), leaving out the delayed ones (a
// requeue after a time, a rate-limited retry), and keeps the statuses held
// back. The queue hands out an object once for all the events that came
// while it waited, and runs it again after a pass when an event came
// during it, so a count that grew since a pass began tells that a pass
// after it serves that event.
type eventCounts struct {
	mu   sync.Mutex
	n    map[types.NamespacedName]uint64
	held map[types.NamespacedName]heldStatus
}

func newEventCounts() *eventCounts {
	return &eventCounts{n: map[types.NamespacedName]uint64{}, held: map[types.NamespacedName]heldStatus{}}
}

func (e *eventCounts) add(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[key]++
}

// count returns the additions counted for key so far.
func (e *eventCounts) count(key types.NamespacedName) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// hold keeps the status a pass held back.
func (e *eventCounts) hold(key types.NamespacedName, h heldStatus) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held[key] = h
}

// takeHeld returns and forgets the status held back for key, if any, and
// whether an event came since the pass that held it began.
func (e *eventCounts) takeHeld(key types.NamespacedName) (h heldStatus, held, eventSince bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, held = e.held[key]
	delete(e.held, key)
	return h, held, held && e.n[key] != h.since
}

func (e *eventCounts) forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.n, key)
	delete(e.held, key)
}

// countingQueue is controller-runtime's priority queue, counting the
// additions of events in counts.
type countingQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	counts *eventCounts
}

// Add counts an event, then adds it: counted first, an event is never
// served by a pass that began before it was counted.
func (q countingQueue) Add(item reconcile.Request) {
	q.counts.add(item.NamespacedName)
	q.PriorityQueue.Add(item)
}

// AddWithOpts counts the additions that are due at once, then adds them.
func (q countingQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.After <= 0 && !o.RateLimited {
		for _, item := range items {
			q.counts.add(item.NamespacedName)
		}
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}
