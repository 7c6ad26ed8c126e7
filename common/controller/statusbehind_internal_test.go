package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

// TestAPassWrittenOverAnotherKeepsItsTransitionTimes checks the conditions
// of a pass that read the object before a status write off the worker
// landed: a condition whose status that write already had keeps the time
// that write gave it, one that changed since with a time of its own keeps
// it, and one whose status the pass kept from the older object, unlike the
// write's, changes now.
func TestAPassWrittenOverAnotherKeepsItsTransitionTimes(t *testing.T) {
	t0, t1, t2, now := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0)),
		metav1.NewTime(time.Unix(300, 0)), metav1.NewTime(time.Unix(400, 0))
	written := &widgetv1.Widget{}
	written.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: t1},
		{Type: "Done", Status: metav1.ConditionFalse, LastTransitionTime: t0},
		{Type: "Processing", Status: metav1.ConditionFalse, LastTransitionTime: t1},
	}
	pass := &widgetv1.Widget{}
	pass.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: t2},
		{Type: "Done", Status: metav1.ConditionTrue, LastTransitionTime: t2},
		{Type: "Blocked", Status: metav1.ConditionFalse, LastTransitionTime: t2},
		{Type: "Processing", Status: metav1.ConditionTrue, LastTransitionTime: t0},
	}
	keepTransitionTimes(pass, written, now)
	want := map[string]metav1.Time{"Ready": t1, "Done": t2, "Blocked": t2, "Processing": now}
	for _, c := range pass.Status.Conditions {
		if w := want[c.Type]; !c.LastTransitionTime.Equal(&w) {
			t.Errorf("%s: lastTransitionTime %v, want %v", c.Type, c.LastTransitionTime, w)
		}
	}
}

// TestOverWrittenTakesTheFieldsAPassLeftFromTheWrite checks the status of a
// pass written over a status write it did not read: each field the pass
// changed is the pass's, each it left as it read it is the write's, and a
// field the write removed goes.
func TestOverWrittenTakesTheFieldsAPassLeftFromTheWrite(t *testing.T) {
	ready := func(s metav1.ConditionStatus, at int64) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: s, Reason: "R", LastTransitionTime: metav1.NewTime(time.Unix(at, 0))}}
	}
	read := &widgetv1.Widget{}
	read.ResourceVersion = "1"
	read.Status.ChildCount, read.Status.Conditions, read.Status.ObservedGeneration = 1, ready(metav1.ConditionFalse, 100), 3
	written := read.DeepCopy()
	written.ResourceVersion = "2"
	written.Status.ChildCount, written.Status.Conditions, written.Status.ObservedGeneration = 2, ready(metav1.ConditionTrue, 200), 0

	for _, tc := range []struct {
		name       string
		childCount int
		conditions []metav1.Condition
		wantCount  int
		wantConds  []metav1.Condition
	}{
		{"left all as read", 1, ready(metav1.ConditionFalse, 100), 2, ready(metav1.ConditionTrue, 200)},
		{"set its own count", 5, ready(metav1.ConditionFalse, 100), 5, ready(metav1.ConditionTrue, 200)},
		{"set its own conditions", 1, ready(metav1.ConditionFalse, 300), 2, ready(metav1.ConditionFalse, 300)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass := read.DeepCopy()
			pass.Status.ChildCount, pass.Status.Conditions = tc.childCount, tc.conditions
			got, err := overWritten(pass, read, written, true)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.ChildCount != tc.wantCount {
				t.Errorf("childCount %d, want %d", got.Status.ChildCount, tc.wantCount)
			}
			if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Status != tc.wantConds[0].Status ||
				!got.Status.Conditions[0].LastTransitionTime.Equal(&tc.wantConds[0].LastTransitionTime) {
				t.Errorf("conditions %v, want %v", got.Status.Conditions, tc.wantConds)
			}
			if got.Status.ObservedGeneration != 0 {
				t.Errorf("observedGeneration %d; the write removed it", got.Status.ObservedGeneration)
			}
			if got.ResourceVersion != "2" || got.Name != read.Name {
				t.Errorf("metadata %+v; want the pass's with the write's resourceVersion", got.ObjectMeta)
			}
			if pass.Status.ChildCount != tc.childCount {
				t.Errorf("the pass's object was changed")
			}
			// Not merged (StatusComplete): the pass's status as it is.
			whole, err := overWritten(pass, read, written, false)
			if err != nil {
				t.Fatal(err)
			}
			if whole.Status.ChildCount != tc.childCount || whole.Status.ObservedGeneration != 3 || whole.ResourceVersion != "2" {
				t.Errorf("not merged: childCount %d, observedGeneration %d, resourceVersion %s; want %d, 3, 2",
					whole.Status.ChildCount, whole.Status.ObservedGeneration, whole.ResourceVersion, tc.childCount)
			}
		})
	}
}

// TestAFailedWriteQueuesItsObjectOnlyWhenNoPassTookIt checks the requeue
// of a status write off the worker that failed: with no pass waiting for
// it, the object is queued again (rate-limited) so that a pass writes its
// status anew; when a pass already took it, that pass writes its own
// status and the object is not queued again.
func TestAFailedWriteQueuesItsObjectOnlyWhenNoPassTookIt(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	req := reconcile.Request{NamespacedName: key}
	newQueue := func(t *testing.T) (*behindWrites, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second))
		t.Cleanup(q.ShutDown)
		b := newBehindWrites()
		b.setQueue(q)
		return b, q
	}
	// takeInBackground takes key's write the way a waiting pass does,
	// once the pass has it, and returns what the pass got.
	takeInBackground := func(t *testing.T, ctx context.Context, b *behindWrites) <-chan error {
		took := make(chan error, 1)
		go func() {
			_, err := b.take(ctx, key)
			took <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for pending(b, key) {
			if time.Now().After(deadline) {
				t.Fatal("the pass did not take the write in 10s")
			}
			time.Sleep(time.Millisecond)
		}
		return took
	}

	t.Run("untaken", func(t *testing.T) {
		b, q := newQueue(t)
		w := b.start(key, "1")
		b.requeueUntaken(key, w)
		close(w.done)
		if n := q.NumRequeues(req); n != 1 {
			t.Errorf("queued again %d times, want 1", n)
		}
		if got, err := b.take(t.Context(), key); got != w || err != nil {
			t.Errorf("the next pass took %v (%v), want the failed write", got, err)
		}
	})

	t.Run("taken by a waiting pass", func(t *testing.T) {
		b, q := newQueue(t)
		w := b.start(key, "1")
		t.Cleanup(func() {
			select {
			case <-w.done:
			default:
				close(w.done)
			}
		})
		took := takeInBackground(t, t.Context(), b)
		b.requeueUntaken(key, w)
		close(w.done)
		if err := <-took; err != nil {
			t.Errorf("the waiting pass: %v", err)
		}
		if n := q.NumRequeues(req); n != 0 {
			t.Errorf("queued again %d times, want 0: the pass that took the write writes its own status", n)
		}
	})

	t.Run("left by a pass whose context ended", func(t *testing.T) {
		b, q := newQueue(t)
		w := b.start(key, "1")
		ctx, cancel := context.WithCancel(t.Context())
		took := takeInBackground(t, ctx, b)
		cancel()
		if err := <-took; !errors.Is(err, context.Canceled) {
			t.Errorf("the pass whose context ended: %v, want context.Canceled", err)
		}
		// The write fails after the pass left: the object is queued
		// again, for a pass to write its status.
		b.requeueUntaken(key, w)
		close(w.done)
		if n := q.NumRequeues(req); n != 1 {
			t.Errorf("queued again %d times, want 1", n)
		}
	})
}

// pending reports whether a write of key's status waits for a pass to
// take it.
func pending(b *behindWrites, key types.NamespacedName) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.byKey[key]
	return ok
}
