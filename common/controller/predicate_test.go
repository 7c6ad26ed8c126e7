package controller_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/labels"
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

// TestSpecOrMetadataChanged: only the status, or only the Controller's own
// finalizer appended (its first write to an object, made by the pass that
// reconciles it), is no change; every other change of the spec or the
// metadata a pass reads is one.
func TestSpecOrMetadataChanged(t *testing.T) {
	obj := func(gen int64, l, a map[string]string, finalizers []string, deleting bool) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: gen, Labels: l, Annotations: a, Finalizers: finalizers}}
		if deleting {
			now := metav1.Now()
			c.DeletionTimestamp = &now
		}
		return c
	}
	const own, other = labels.Finalizer, "example.com/other"
	status := obj(1, nil, nil, nil, false)
	status.Data = map[string]string{"not": "metadata"}
	for _, tc := range []struct {
		name     string
		old, new *corev1.ConfigMap
		want     bool
	}{
		{"nothing the pass reads", obj(1, nil, nil, nil, false), status, false},
		{"own finalizer added", obj(1, nil, nil, nil, false), obj(1, nil, nil, []string{own}, false), false},
		{"own finalizer appended after another", obj(1, nil, nil, []string{other}, false), obj(1, nil, nil, []string{other, own}, false), false},
		{"own finalizer added with a spec change", obj(1, nil, nil, nil, false), obj(2, nil, nil, []string{own}, false), true},
		{"own finalizer added with a label", obj(1, nil, nil, nil, false), obj(1, map[string]string{"a": "1"}, nil, []string{own}, false), true},
		{"own finalizer added with an annotation", obj(1, nil, nil, nil, false), obj(1, nil, map[string]string{"a": "1"}, []string{own}, false), true},
		{"own finalizer added as deletion began", obj(1, nil, nil, nil, false), obj(1, nil, nil, []string{own}, true), true},
		{"own finalizer added and another removed", obj(1, nil, nil, []string{other}, false), obj(1, nil, nil, []string{own}, false), true},
		{"own finalizer put first, not appended", obj(1, nil, nil, []string{other}, false), obj(1, nil, nil, []string{own, other}, false), true},
		{"own finalizer and another added", obj(1, nil, nil, nil, false), obj(1, nil, nil, []string{other, own}, false), true},
		{"own finalizer added twice", obj(1, nil, nil, []string{own}, false), obj(1, nil, nil, []string{own, own}, false), true},
		{"own finalizer taken off", obj(1, nil, nil, []string{own}, false), obj(1, nil, nil, nil, false), true},
		{"another finalizer added", obj(1, nil, nil, nil, false), obj(1, nil, nil, []string{other}, false), true},
		{"spec", obj(1, nil, nil, nil, false), obj(2, nil, nil, nil, false), true},
		{"deletion began", obj(1, nil, nil, []string{own}, false), obj(1, nil, nil, []string{own}, true), true},
	} {
		if got := controller.SpecOrMetadataChanged(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: changed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
