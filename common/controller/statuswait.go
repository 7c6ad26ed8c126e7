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
// handler sets records nothing new that a later pass needs: it changes by
// counts, conditions and messages only, and records no new state such as
// what the pass wrote outside the cluster.
// The Controller may then hold the status back and queue the object again
// StatusWaitDelay later: a pass that an event of the object starts
// meanwhile computes the status anew and may hold it back in turn, and if
// none comes, the queued pass writes the held status without calling the
// handler. Statuses are held back for at most Options.StatusMaxWait from
// the first one held back since a status of the object was last written:
// the object is queued again by then, and the first pass after that
// writes its status, off the worker: the pass an event of the object
// starts meanwhile runs its handler while the write is on its way, and
// waits for it only before deciding on its own status, which it then
// writes over that one (the status fields it left as it read them take
// that write's values). A handler whose pass wrote outside the cluster must
// call it only when the status records nothing new of that write. Outside
// a Controller's pass, and for a Controller whose queue does not count
// events (see NewBuilder), it does nothing.
func StatusMayWait(ctx context.Context) {
	if n, ok := ctx.Value(passNotesKey{}).(*PassNotes); ok {
		n.statusMayWait = true
	}
}

// StatusComplete tells the Controller running this pass that the handler
// set every status field it owns from what it knows now. It matters for a
// pass that read the object before a status write off the worker landed
// (see StatusMayWait): the pass's status is then written over that one as
// the handler set it. Without it, each top-level status field the pass
// left as it read it takes that write's value, which is right for a pass
// that returned before setting its status (a failure) but wrong for one
// that computed a field anew and found the value it read (a count that
// went back). Outside a Controller's pass it does nothing.
func StatusComplete(ctx context.Context) {
	if n, ok := ctx.Value(passNotesKey{}).(*PassNotes); ok {
		n.statusComplete = true
	}
}

// StatusWaitDelay is how long after a pass that held its status back the
// object is queued again, for that status to be written if no event came.
const StatusWaitDelay = 200 * time.Millisecond

// DefaultStatusMaxWait is the longest statuses are held back while events
// keep coming, when Options.StatusMaxWait is zero.
const DefaultStatusMaxWait = time.Second

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
	statusMayWait  bool
	statusComplete bool
	servesEvents   bool
	// since is the count of the object's events when the pass began.
	since uint64
}

// StatusMayWait reports whether the handler called StatusMayWait.
func (n *PassNotes) StatusMayWait() bool { return n.statusMayWait }

// StatusComplete reports whether the handler called StatusComplete.
func (n *PassNotes) StatusComplete() bool { return n.statusComplete }

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
	// unwritten holds, per object a status was held back for since its
	// status was last written, when the first of those was held back: from
	// maxWait after it, its passes write until one is written.
	unwritten map[types.NamespacedName]time.Time
	maxWait   time.Duration
	now       func() time.Time
	// counting is set once a queue counts the events (NewQueue ran);
	// without it no status is held back, as no event could be told.
	counting atomic.Bool
}

// newEventCounts returns eventCounts that hold statuses back for at most
// maxWait (DefaultStatusMaxWait when zero) while events keep coming, by the
// clock now.
func newEventCounts(maxWait time.Duration, now func() time.Time) *eventCounts {
	if maxWait == 0 {
		maxWait = DefaultStatusMaxWait
	}
	return &eventCounts{n: map[types.NamespacedName]uint64{}, begun: map[types.NamespacedName]uint64{},
		held: map[types.NamespacedName]heldStatus{}, unwritten: map[types.NamespacedName]time.Time{}, maxWait: maxWait, now: now}
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

// hold keeps the status a pass held back, in place of any kept before,
// unless no queue counts the events or the first status of key held back
// since its status was last written was held maxWait ago or more. It
// reports whether it kept it and, if so, how long after now the object is
// to be queued for it to be written: StatusWaitDelay, or less when the
// wait ends sooner.
func (e *eventCounts) hold(key types.NamespacedName, h heldStatus) (after time.Duration, kept bool) {
	if !e.counting.Load() {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	first, waiting := e.unwritten[key]
	if !waiting {
		first, e.unwritten[key] = now, now
	}
	left := first.Add(e.maxWait).Sub(now)
	if left <= 0 {
		return 0, false
	}
	e.held[key] = h
	return min(StatusWaitDelay, left), true
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
