package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

// TestHeldStatusesWaitStatusMaxWaitAtMost holds statuses back by a settable
// clock: while the first held back since the last write is younger than
// the maximum wait, each pass's replaces the one before and the object is
// queued again StatusWaitDelay later, or when the wait ends if sooner; from
// then on none is held back until a status is written, which starts a new
// wait.
func TestHeldStatusesWaitStatusMaxWaitAtMost(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	e := newEventCounts(0, c.now)
	e.counting.Store(true)
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	step := func(d time.Duration) { c.t = c.t.Add(d) }
	expectHeld := func(since uint64, after time.Duration) {
		t.Helper()
		got, kept := e.hold(key, heldStatus{since: since})
		if !kept || got != after {
			t.Fatalf("pass %d: held back %v, to be written after %s; want held back, after %s", since, kept, got, after)
		}
	}
	expectWritten := func(since uint64) {
		t.Helper()
		if _, kept := e.hold(key, heldStatus{since: since}); kept {
			t.Fatalf("pass %d: its status was held back, %s after the first since the last write; want it written", since, DefaultStatusMaxWait)
		}
	}

	expectHeld(1, StatusWaitDelay)
	step(DefaultStatusMaxWait - StatusWaitDelay)
	expectHeld(2, StatusWaitDelay)
	step(StatusWaitDelay / 2)
	expectHeld(3, StatusWaitDelay/2) // queued again when the wait ends
	if h, held, _ := e.takeHeld(key); !held || h.since != 3 {
		t.Fatalf("the status held back is that of pass %d (held %v), want the last one's (3)", h.since, held)
	}
	step(StatusWaitDelay / 2)
	expectWritten(4)
	step(time.Hour)
	expectWritten(5)
	e.wrote(key)
	expectHeld(6, StatusWaitDelay)
	step(DefaultStatusMaxWait / 2)
	expectHeld(7, StatusWaitDelay)
}

// TestANegativeStatusMaxWaitHoldsNothingBack: a Controller given a
// negative maximum wait writes every status at once.
func TestANegativeStatusMaxWaitHoldsNothingBack(t *testing.T) {
	e := newEventCounts(-time.Nanosecond, time.Now)
	e.counting.Store(true)
	if _, kept := e.hold(types.NamespacedName{Name: "w"}, heldStatus{}); kept {
		t.Fatal("a status was held back with a negative maximum wait")
	}
}

// TestStatusMaxWaitComesFromOptionsThenConfig checks which setting a
// Controller holds statuses back by: its Options' when set, else the
// framework configuration's (--status-max-wait), else the default.
func TestStatusMaxWaitComesFromOptionsThenConfig(t *testing.T) {
	for _, c := range []struct {
		name          string
		options, conf time.Duration
		want          time.Duration
	}{
		{"options win", 2 * time.Second, 5 * time.Second, 2 * time.Second},
		{"configuration", 0, 5 * time.Second, 5 * time.Second},
		{"default", 0, 0, DefaultStatusMaxWait},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{StatusMaxWait: c.options}
			opts.Config.StatusMaxWait = c.conf
			ctrl := New[*widgetv1.Widget]("w", nil, nil, opts)
			if ctrl.events.maxWait != c.want {
				t.Fatalf("held back for at most %s, want %s", ctrl.events.maxWait, c.want)
			}
		})
	}
}
