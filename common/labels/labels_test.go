package labels_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/labels"
)

func TestOwnerOfReadsBackOwner(t *testing.T) {
	for _, owner := range []metav1.ObjectMeta{
		{Namespace: "team-a", Name: "web", UID: "u-1"},
		{Name: "cluster-wide", UID: "u-2"},
	} {
		key, uid, ok := labels.OwnerOf(labels.Owner(&owner, "Widget"), "Widget")
		if !ok || key != (types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}) || uid != owner.UID {
			t.Errorf("OwnerOf(Owner(%s/%s)) = %v, %v, %v", owner.Namespace, owner.Name, key, uid, ok)
		}
	}
}

func TestOwnerOfNamesNoOwnerFromIncompleteLabels(t *testing.T) {
	full := labels.Owner(&metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "u-1"}, "Widget")
	without := func(k string) map[string]string {
		l := map[string]string{}
		for kk, v := range full {
			if kk != k {
				l[kk] = v
			}
		}
		return l
	}
	cases := map[string]map[string]string{
		"another kind": full,
		"no UID":       without(labels.OwnerUID),
		"no name":      without(labels.OwnerName),
		"no kind":      without(labels.OwnerKind),
		"no labels":    nil,
	}
	for what, l := range cases {
		kind := "Widget"
		if what == "another kind" {
			kind = "Gadget"
		}
		if _, _, ok := labels.OwnerOf(l, kind); ok {
			t.Errorf("%s: OwnerOf named an owner", what)
		}
	}
	// A name that is no label value is left out by Owner, so it names no owner.
	long := labels.Owner(&metav1.ObjectMeta{Namespace: "team-a", Name: strings.Repeat("n", 64), UID: "u-1"}, "Widget")
	if _, _, ok := labels.OwnerOf(long, "Widget"); ok {
		t.Error("OwnerOf named an owner whose name Owner left out")
	}
}

// TestOwnerOfObjectNamesAnOwnerWhoseNameIsNoLabelValue: a namespaced owner
// may have a name of up to 253 characters, which no label can hold. Its
// child names it through OwnerAnnotations, and OwnerOfObject reads it back;
// a short name needs no annotation, and the annotation never overrides the
// label.
func TestOwnerOfObjectNamesAnOwnerWhoseNameIsNoLabelValue(t *testing.T) {
	for _, name := range []string{"web", strings.Repeat("n", 64), strings.Repeat("n", 253)} {
		owner := metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: "u-1"}
		child := metav1.ObjectMeta{Labels: labels.Owner(&owner, "Widget"), Annotations: labels.OwnerAnnotations(&owner)}
		if len(name) <= 63 && child.Annotations != nil {
			t.Errorf("a name that fits a label got annotations %v", child.Annotations)
		}
		key, uid, ok := labels.OwnerOfObject(&child, "Widget")
		if !ok || key != (types.NamespacedName{Namespace: "team-a", Name: name}) || uid != "u-1" {
			t.Errorf("OwnerOfObject(child of %d-character name) = %v, %v, %v", len(name), key, uid, ok)
		}
	}
	forged := metav1.ObjectMeta{
		Labels:      labels.Owner(&metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "u-1"}, "Widget"),
		Annotations: map[string]string{labels.OwnerNameAnnotation: "other"},
	}
	if key, _, _ := labels.OwnerOfObject(&forged, "Widget"); key.Name != "web" {
		t.Errorf("the annotation overrode the owner-name label: %v", key)
	}
	if _, _, ok := labels.OwnerOfObject(&metav1.ObjectMeta{Annotations: map[string]string{labels.OwnerNameAnnotation: "x"}}, "Widget"); ok {
		t.Error("an annotation alone named an owner")
	}
}
