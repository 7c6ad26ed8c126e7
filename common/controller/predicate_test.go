package controller_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/common/controller"
)

func TestLabelsOrDeletionChanged(t *testing.T) {
	ns := func(l map[string]string, deleting bool) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: l}}
		if deleting {
			now := metav1.Now()
			n.DeletionTimestamp = &now
		}
		return n
	}
	p := controller.LabelsOrDeletionChanged()
	for _, tc := range []struct {
		name     string
		old, new *corev1.Namespace
		want     bool
	}{
		{"nothing that selects changed", ns(map[string]string{"a": "1"}, false), ns(map[string]string{"a": "1"}, false), false},
		{"a label value", ns(map[string]string{"a": "1"}, false), ns(map[string]string{"a": "2"}, false), true},
		{"a label removed", ns(map[string]string{"a": "1"}, false), ns(nil, false), true},
		{"an empty label added", ns(nil, false), ns(map[string]string{"a": ""}, false), true},
		{"deletion began", ns(nil, false), ns(nil, true), true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: ns(nil, false)}) || !p.Delete(event.DeleteEvent{Object: ns(nil, false)}) {
		t.Error("creations and deletions must pass")
	}
}
