package condition_test

// Covers condition.Repair (run by the Controller before every status
// write): it must not replace the Ready/Processing the Controller just set,
// and leaves a valid status as it is. That idle passes write nothing, with
// conditions set by hand, is the Controller's part (its specs "idle passes
// of a handler that uses status.Common.SetCondition").
//
// passOnce below mimics the Controller's finish: the handler's step, then
// Set(Done), Set(Ready or NotReady), Repair, and compares the result with the
// status as read back (a JSON round trip, which keeps whole seconds of a
// transition time, as the API server does).

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/condition"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

// readBack returns w as the API server would return it after a write,
// read by the next pass a minute later (a resync): its transition times
// are moved a minute back, as if written then.
func readBack(t *testing.T, w *widgetv1.Widget) *widgetv1.Widget {
	t.Helper()
	raw, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	out := &widgetv1.Widget{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	for i := range out.Status.Conditions {
		c := &out.Status.Conditions[i]
		c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Add(-time.Minute))
	}
	return out
}

// sameStatus compares two statuses as the Controller does (statusOf: as
// they serialise, transition times to the second).
func sameStatus(t *testing.T, a, b *widgetv1.Widget) bool {
	t.Helper()
	ra, err := json.Marshal(a.Status)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := json.Marshal(b.Status)
	if err != nil {
		t.Fatal(err)
	}
	return string(ra) == string(rb)
}

// passOnce runs one successful pass of the Controller's status handling on
// a copy of read, with handler as the handler's own condition work, and
// reports whether the status it would write differs from read's.
func passOnce(t *testing.T, read *widgetv1.Widget, handler func(w *widgetv1.Widget)) (*widgetv1.Widget, bool) {
	t.Helper()
	w := read.DeepCopy()
	handler(w)
	condition.Set(w, condition.NewDone())
	condition.Set(w, condition.NewReady(""))
	condition.Repair(w)
	changed := !sameStatus(t, read, w)
	return readBack(t, w), changed
}

// steady runs four passes and fails when a pass after the first would
// write the status again, naming every such pass (pass 2 may only reorder;
// passes 3 and 4 show a write on every pass).
func steady(t *testing.T, what string, handler func(w *widgetv1.Widget)) {
	t.Helper()
	w := &widgetv1.Widget{}
	w.Generation = 1
	w, _ = passOnce(t, w, handler)
	var wrote []int
	var last string
	for pass := 2; pass <= 4; pass++ {
		var changed bool
		before := w.DeepCopy()
		w, changed = passOnce(t, w, handler)
		if changed {
			wrote = append(wrote, pass)
			last = fmt.Sprintf("\n read  %+v\n wrote %+v", before.Status.Conditions, w.Status.Conditions)
		}
	}
	if len(wrote) > 0 {
		t.Errorf("%s: idle passes %v write the status again; the last:%s", what, wrote, last)
	}
}

// Finding: a handler that appends a Ready condition of its own (a copy of a
// child's, say) to the conditions read: the Controller's Set updates the
// first Ready in place and Repair then keeps the handler's later one, so a
// failed pass reports Ready=True.
func TestRepairKeepsTheControllersReadyOverAHandlersAppended(t *testing.T) {
	w := &widgetv1.Widget{}
	w.Generation = 1
	condition.Set(w, condition.NewReady(""))
	w = readBack(t, w)
	// The handler's step.
	w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: condition.TypeReady, Status: metav1.ConditionTrue, Reason: "Copied", LastTransitionTime: metav1.Now()})
	// The pass failed: the Controller's finish.
	condition.Set(w, condition.NewProcessing("boom"))
	condition.Set(w, condition.NewNotReady(condition.ReasonError, "boom"))
	condition.Repair(w)
	r := condition.Find(w, condition.TypeReady)
	if r == nil || r.Status != metav1.ConditionFalse {
		t.Errorf("a failed pass writes Ready %+v, want the Controller's Ready=False", r)
	}
}

// What holds: conditions set with condition.Set (whatever was wrong with
// them), and SetCondition with an invalid reason or an over-long message,
// are stable across passes.
func TestRepairLeavesAValidStatusAsItIs(t *testing.T) {
	steady(t, "Set with an invalid type", func(w *widgetv1.Widget) {
		condition.Set(w, metav1.Condition{Type: "not a type", Status: "Maybe", Reason: "no reason", Message: "m"})
	})
	steady(t, "SetCondition with an invalid reason", func(w *widgetv1.Widget) {
		w.Status.SetCondition(metav1.Condition{Type: "Synced", Status: metav1.ConditionTrue, Reason: "no reason", Message: "m"})
	})
	steady(t, "SetCondition with an over-long message", func(w *widgetv1.Widget) {
		w.Status.SetCondition(metav1.Condition{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Fine", Message: strings.Repeat("x", 40000)})
	})
	// Repair leaves no zero transition time and no duplicate type.
	w := &widgetv1.Widget{}
	w.Status.Conditions = []metav1.Condition{
		{Type: "a b", Status: "x", Reason: "r r"},
		{Type: "c d", Status: metav1.ConditionTrue, Reason: "R"},
		{Type: condition.TypeReady, Status: metav1.ConditionTrue, Reason: "R"},
	}
	condition.Repair(w)
	seen := map[string]bool{}
	for _, c := range w.Status.Conditions {
		if seen[c.Type] || c.LastTransitionTime.IsZero() || !condition.ValidType(c.Type) || !condition.ValidReason(c.Reason) {
			t.Errorf("unrepaired: %+v", c)
		}
		seen[c.Type] = true
	}
}
