package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

// TestAPassWrittenOverAnotherKeepsItsTransitionTimes checks the conditions
// of a pass that read the object before a status write off the worker
// landed: a condition whose status that write already had keeps the time
// that write gave it, and one whose status changed since gets the pass's.
func TestAPassWrittenOverAnotherKeepsItsTransitionTimes(t *testing.T) {
	t0, t1, t2 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0)), metav1.NewTime(time.Unix(300, 0))
	written := &widgetv1.Widget{}
	written.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: t1},
		{Type: "Done", Status: metav1.ConditionFalse, LastTransitionTime: t0},
	}
	pass := &widgetv1.Widget{}
	pass.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: t2},
		{Type: "Done", Status: metav1.ConditionTrue, LastTransitionTime: t2},
		{Type: "Blocked", Status: metav1.ConditionFalse, LastTransitionTime: t2},
	}
	keepTransitionTimes(pass, written)
	want := map[string]metav1.Time{"Ready": t1, "Done": t2, "Blocked": t2}
	for _, c := range pass.Status.Conditions {
		if !c.LastTransitionTime.Equal(&metav1.Time{Time: want[c.Type].Time}) {
			t.Errorf("%s: lastTransitionTime %v, want %v", c.Type, c.LastTransitionTime, want[c.Type])
		}
	}
}
