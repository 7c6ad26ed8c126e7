package condition_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/object"
)

func TestProcessingStatusFollowsKstatus(t *testing.T) {
	if c := condition.NewProcessing(condition.ReasonDone, ""); c.Status != metav1.ConditionFalse {
		t.Fatalf("Done must be Processing=False, got %s", c.Status)
	}
	for _, r := range []string{condition.ReasonProcessing, condition.ReasonBlocked} {
		if c := condition.NewProcessing(r, "m"); c.Status != metav1.ConditionTrue || c.Type != condition.TypeProcessing {
			t.Fatalf("%s must be Processing=True, got %+v", r, c)
		}
	}
}

func TestReadyConstructors(t *testing.T) {
	if c := condition.NewReady("ok"); c.Status != metav1.ConditionTrue || c.Reason != condition.ReasonReady {
		t.Fatalf("NewReady = %+v", c)
	}
	if c := condition.NewNotReady("", "m"); c.Reason != condition.ReasonNotReady || c.Status != metav1.ConditionFalse {
		t.Fatalf("NewNotReady default reason = %+v", c)
	}
	if c := condition.NewNotReady("SpireUnavailable", "m"); c.Reason != "SpireUnavailable" {
		t.Fatalf("NewNotReady keeps the reason, got %+v", c)
	}
}

func TestIsReadyNeedsCurrentGeneration(t *testing.T) {
	w := &testapi.Widget{}
	w.Generation = 2
	if condition.IsReady(w) {
		t.Fatal("no condition: not ready")
	}
	ready := condition.NewReady("")
	ready.ObservedGeneration = 1
	w.SetCondition(ready)
	if condition.IsReady(w) {
		t.Fatal("Ready for an older generation is not ready")
	}
	ready.ObservedGeneration = 2
	w.SetCondition(ready)
	if !condition.IsReady(w) {
		t.Fatal("Ready=True for the current generation is ready")
	}
	notReady := condition.NewNotReady("X", "")
	notReady.ObservedGeneration = 2
	w.SetCondition(notReady)
	if condition.IsReady(w) {
		t.Fatal("Ready=False is not ready")
	}
	if meta.FindStatusCondition(w.GetConditions(), condition.TypeReady) != condition.Find(w, condition.TypeReady) {
		t.Fatal("Find must return the condition in place")
	}
}

func TestListsExposeTheirItems(t *testing.T) {
	var list object.List[*testapi.Widget] = &testapi.WidgetList{Items: []testapi.Widget{{}, {}}}
	items := list.GetItems()
	if len(items) != 2 {
		t.Fatalf("GetItems returned %d items, want 2", len(items))
	}
	items[0].Name = "changed"
	if list.(*testapi.WidgetList).Items[0].Name != "changed" {
		t.Fatal("GetItems must return pointers into the list")
	}
}
