package condition_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/condition"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/object"
)

func TestProcessingStatusFollowsKstatus(t *testing.T) {
	for _, tc := range []struct {
		c      metav1.Condition
		status metav1.ConditionStatus
		reason string
	}{
		{condition.NewProcessing("m"), metav1.ConditionTrue, condition.ReasonProcessing},
		{condition.NewBlocked("m"), metav1.ConditionTrue, condition.ReasonBlocked},
		{condition.NewDone(), metav1.ConditionFalse, condition.ReasonDone},
	} {
		if tc.c.Type != condition.TypeProcessing || tc.c.Status != tc.status || tc.c.Reason != tc.reason {
			t.Fatalf("got %+v, want Processing=%s reason %s", tc.c, tc.status, tc.reason)
		}
	}
}

func TestSetStampsTheGenerationAndKeepsTheTransitionTime(t *testing.T) {
	w := &widgetv1.Widget{}
	w.Generation = 3
	condition.SetStatus(w, "Custom", true, "Fine", "m")
	c := condition.Find(w, "Custom")
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Fine" || c.ObservedGeneration != 3 {
		t.Fatalf("Set = %+v, want Custom=True reason Fine for generation 3", c)
	}
	if c.LastTransitionTime.IsZero() {
		t.Fatal("Set must stamp a transition time")
	}
	then := metav1.NewTime(c.LastTransitionTime.Add(-time.Hour))
	c.LastTransitionTime = then
	w.Generation = 4
	condition.SetStatus(w, "Custom", true, "StillFine", "m2")
	c = condition.Find(w, "Custom")
	if !c.LastTransitionTime.Equal(&then) || c.ObservedGeneration != 4 || c.Reason != "StillFine" {
		t.Fatalf("same status: transition time kept, generation and reason updated; got %+v", c)
	}
	condition.SetStatus(w, "Custom", false, "Broken", "m3")
	if c = condition.Find(w, "Custom"); c.LastTransitionTime.Equal(&then) || c.Status != metav1.ConditionFalse {
		t.Fatalf("a status change moves the transition time; got %+v", c)
	}
}

// TestStatusKeepsItsFieldNames guards the CRDs: the embedded Status must
// serialise as status.conditions and status.observedGeneration, beside the
// kind's own fields.
func TestStatusKeepsItsFieldNames(t *testing.T) {
	w := &widgetv1.Widget{}
	w.Status.ObservedGeneration = 7
	w.Status.ChildCount = 2
	w.Status.SetCondition(condition.NewReady(""))
	raw, err := json.Marshal(w.Status)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"conditions", "observedGeneration", "childCount"} {
		if _, ok := got[key]; !ok {
			t.Fatalf("status %s lacks %q", raw, key)
		}
	}
	if len(got) != 3 {
		t.Fatalf("status %s has more than conditions, observedGeneration and childCount", raw)
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
	w := &widgetv1.Widget{}
	w.Generation = 2
	if condition.IsReady(w) {
		t.Fatal("no condition: not ready")
	}
	ready := condition.NewReady("")
	ready.ObservedGeneration = 1
	w.Status.SetCondition(ready)
	if condition.IsReady(w) {
		t.Fatal("Ready for an older generation is not ready")
	}
	ready.ObservedGeneration = 2
	w.Status.SetCondition(ready)
	if !condition.IsReady(w) {
		t.Fatal("Ready=True for the current generation is ready")
	}
	notReady := condition.NewNotReady("X", "")
	notReady.ObservedGeneration = 2
	w.Status.SetCondition(notReady)
	if condition.IsReady(w) {
		t.Fatal("Ready=False is not ready")
	}
	if meta.FindStatusCondition(w.Status.Conditions, condition.TypeReady) != condition.Find(w, condition.TypeReady) {
		t.Fatal("Find must return the condition in place")
	}
}

func TestListsExposeTheirItems(t *testing.T) {
	var list object.List[*widgetv1.Widget] = &widgetv1.WidgetList{Items: []widgetv1.Widget{{}, {}}}
	items := list.GetItems()
	if len(items) != 2 {
		t.Fatalf("GetItems returned %d items, want 2", len(items))
	}
	items[0].Name = "changed"
	if list.(*widgetv1.WidgetList).Items[0].Name != "changed" {
		t.Fatal("GetItems must return pointers into the list")
	}
}

// TestSetCutsAMessageTooLongForTheAPIServer checks the cut against an
// independent count: the message fits condition.MaxMessageLength, stays valid UTF-8,
// keeps the longest prefix of whole characters that leaves room for the
// note, and the note counts exactly the bytes cut.
func TestSetCutsAMessageTooLongForTheAPIServer(t *testing.T) {
	for _, m := range []string{
		strings.Repeat("a", condition.MaxMessageLength),
		strings.Repeat("a", condition.MaxMessageLength+1),
		"x" + strings.Repeat("é", 20000),
		strings.Repeat("€", 20000) + "z",
		strings.Repeat("𝄞", 9000),
	} {
		obj := &widgetv1.Widget{}
		condition.Set(obj, condition.NewNotReady("Broken", m))
		got := condition.Find(obj, condition.TypeReady).Message
		if len(m) <= condition.MaxMessageLength {
			if got != m {
				t.Errorf("a message of %d bytes was changed", len(m))
			}
			continue
		}
		if len(got) > condition.MaxMessageLength || !utf8.ValidString(got) {
			t.Fatalf("cut to %d bytes (valid UTF-8: %v)", len(got), utf8.ValidString(got))
		}
		i := strings.LastIndex(got, " ... (")
		kept, note := got[:i], got[i:]
		if !strings.HasPrefix(m, kept) {
			t.Fatalf("the kept part is not a prefix of the message")
		}
		if want := fmt.Sprintf(" ... (%d bytes cut)", len(m)-len(kept)); note != want {
			t.Errorf("note %q, want %q", note, want)
		}
		// No whole character more would have fitted.
		_, next := utf8.DecodeRuneInString(m[len(kept):])
		if len(kept)+next+len(note) <= condition.MaxMessageLength {
			t.Errorf("cut %d bytes where %d would do", len(m)-len(kept), len(m)-len(kept)-next)
		}
	}
}

// TestSetMakesAMessageValidUTF8AsTheStatusWriteWould checks Set against
// encoding/json, which a status write goes through: a message set is the
// message read back, so an unchanged status is not written again.
func TestSetMakesAMessageValidUTF8AsTheStatusWriteWould(t *testing.T) {
	for _, m := range []string{"fine", "a\xffb", "\xc3", "\xe2\x82", "ok \uFFFD kept", "\xff\xfe\xfd", "é\x80é"} {
		obj := &widgetv1.Widget{}
		condition.Set(obj, condition.NewNotReady("Broken", m))
		got := condition.Find(obj, condition.TypeReady).Message
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var readBack string
		if err := json.Unmarshal(raw, &readBack); err != nil {
			t.Fatal(err)
		}
		if got != readBack {
			t.Errorf("Set(%q) holds %q, a status write reads back %q", m, got, readBack)
		}
	}
}

// TestCutKeepsWithinAnyLimit checks Cut at limits small and large with the
// same independent count: the result fits the limit, is valid UTF-8, is a
// prefix of the message (with a note counting exactly the bytes cut when
// the limit leaves room for one), and no whole character more would fit.
func TestCutKeepsWithinAnyLimit(t *testing.T) {
	for _, limit := range []int{0, 1, 5, 19, 20, 64, 1024} {
		for _, m := range []string{"", "short", strings.Repeat("a", 1025), "x" + strings.Repeat("é", 700), strings.Repeat("𝄞", 400), strings.Repeat("\x01", 5000)} {
			got := condition.Cut(m, limit)
			if len(m) <= limit {
				if got != m {
					t.Errorf("limit %d: a message of %d bytes was changed", limit, len(m))
				}
				continue
			}
			if len(got) > limit || !utf8.ValidString(got) {
				t.Fatalf("limit %d: cut to %d bytes (valid UTF-8: %v)", limit, len(got), utf8.ValidString(got))
			}
			kept, note := got, ""
			if i := strings.LastIndex(got, " ... ("); i >= 0 {
				kept, note = got[:i], got[i:]
				if want := fmt.Sprintf(" ... (%d bytes cut)", len(m)-len(kept)); note != want {
					t.Errorf("limit %d: note %q, want %q", limit, note, want)
				}
			}
			if !strings.HasPrefix(m, kept) {
				t.Fatalf("limit %d: the kept part is not a prefix of the message", limit)
			}
			if _, next := utf8.DecodeRuneInString(m[len(kept):]); len(kept)+next+len(note) <= limit {
				t.Errorf("limit %d: cut %d bytes where %d would do", limit, len(m)-len(kept), len(m)-len(kept)-next)
			}
		}
	}
}
