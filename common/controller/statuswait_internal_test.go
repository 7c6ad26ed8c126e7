package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestHeldStatusesWaitStatusMaxWaitAtMost holds statuses back by a settable
// clock: while the first held back since the last write is younger than
// the maximum wait, each pass's replaces the one before; from then on none
// is held back until a status is written, which starts a new wait.
func TestHeldStatusesWaitStatusMaxWaitAtMost(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	e := newEventCounts(0, c.now)
	e.counting.Store(true)
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	hold := func(since uint64) bool { return e.hold(key, heldStatus{since: since}) }
	step := func(d time.Duration) { c.t = c.t.Add(d) }

	if !hold(1) {
		t.Fatal("the first status after a write was not held back")
	}
	step(DefaultStatusMaxWait - time.Millisecond)
	if !hold(2) {
		t.Fatalf("a status %s after the first held back was not held back, with a maximum wait of %s", DefaultStatusMaxWait-time.Millisecond, DefaultStatusMaxWait)
	}
	if h, held, _ := e.takeHeld(key); !held || h.since != 2 {
		t.Fatalf("the status held back is that of pass %d (held %v), want the last one's (2)", h.since, held)
	}
	step(time.Millisecond)
	if hold(3) {
		t.Fatalf("a status was held back %s after the first, with a maximum wait of %s", DefaultStatusMaxWait, DefaultStatusMaxWait)
	}
	step(time.Hour)
	if hold(4) {
		t.Fatal("a status was held back though none was written since the wait ended")
	}
	e.wrote(key)
	if !hold(5) {
		t.Fatal("the first status after a write was not held back")
	}
	step(DefaultStatusMaxWait / 2)
	if !hold(6) {
		t.Fatal("a write did not start a new wait")
	}
}
