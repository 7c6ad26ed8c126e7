package controller

import (
	"context"
	"sync"
	"sync/atomic"
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
// The Controller may then hold the status back and queue the object again
// StatusWaitDelay later: a pass that an event of the object starts
// meanwhile computes the status anew and writes it, and if none comes, the
// queued pass writes the held status without calling the handler. Once a
// status was held back, none is until a status of the object is written,
// so while events keep coming at least every other pass writes. A handler
// whose pass wrote outside the cluster must not call it. Outside a
// Controller's pass, and for a Controller whose queue does not count
// events (see NewBuilder), it does nothing.
func StatusMayWait(ctx context.Context) {
	if n, ok := ctx.Value(passNotesKey{}).(*PassNotes); ok {
		n.statusMayWait = true
	}
}

// StatusWaitDelay is how long after a pass that held its status back the
// object is queued again, for that status to be written if no event came.
const StatusWaitDelay = 200 * time.Millisecond

// PassServesEvents reports whether the pass running in ctx serves at least
// one event of its object counted since the object's previous pass began
// (for its first pass, since the Controller started). It is false for a
// pass that only a requeue started (the periodic resync, RequeueAfter, a
// retry), outside a Controller's pass, and for a Controller whose queue does
// not count events (see NewBuilder). A handler that records what its event
// handlers saw, to serve an event with less work than a resync, can tell by
// it that finding nothing recorded means an earlier pass took the record,
// not that a resync is due.
func PassServesEvents(ctx context.Context) bool {
	return passNotesOf(ctx).servesEvents
}

// PassNotes is what the Controller and a handler told each other during
// one pass.
type PassNotes struct {
	statusMayWait bool
	servesEvents  bool
	// since is the count of the object's events when the pass began.
	since uint64
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

// WithEventPassNotes is WithPassNotes for a pass that serves events
// (PassServesEvents), for a handler's tests.
func WithEventPassNotes(ctx context.Context) (context.Context, *PassNotes) {
	ctx, n := WithPassNotes(ctx)
	n.servesEvents = true
	return ctx, n
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
	mu sync.Mutex
	n  map[types.NamespacedName]uint64
	// begun is, per object, n when its last pass began.
	begun map[types.NamespacedName]uint64
	held  map[types.NamespacedName]heldStatus
	// unwritten are the objects a status was held back for since their
	// status was last written: their passes write until it is.
	unwritten map[types.NamespacedName]bool
	// counting is set once a queue counts the events (NewQueue ran);
	// without it no status is held back, as no event could be told.
	counting atomic.Bool
}

func newEventCounts() *eventCounts {
	return &eventCounts{n: map[types.NamespacedName]uint64{}, begun: map[types.NamespacedName]uint64{},
		held: map[types.NamespacedName]heldStatus{}, unwritten: map[types.NamespacedName]bool{}}
}

func (e *eventCounts) add(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[key]++
}

// begin records that a pass of key begins, and returns the additions
// counted for key so far and whether any was counted since key's previous
// pass began (false when no queue counts the events).
func (e *eventCounts) begin(key types.NamespacedName) (count uint64, eventSince bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	count = e.n[key]
	eventSince = e.counting.Load() && count != e.begun[key]
	e.begun[key] = count
	return count, eventSince
}

// hold keeps the status a pass held back, unless no queue counts the
// events or a status of key was held back since its status was last
// written; it reports whether it kept it.
func (e *eventCounts) hold(key types.NamespacedName, h heldStatus) bool {
	if !e.counting.Load() {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.unwritten[key] {
		return false
	}
	e.held[key], e.unwritten[key] = h, true
	return true
}

// wrote records that key's status was written (or needed no write).
func (e *eventCounts) wrote(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.unwritten, key)
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
	delete(e.begun, key)
	delete(e.held, key)
	delete(e.unwritten, key)
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
