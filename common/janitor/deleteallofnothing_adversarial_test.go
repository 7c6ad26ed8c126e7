package janitor_test

// Specs of the janitor's DeleteAllOf after it began adding the owner's
// labels to the caller's selector (client.MatchingLabels) instead of
// replacing it: a caller's selector that selects nothing.
//
// metav1.LabelSelectorAsSelector(nil) is labels.Nothing(): a handler that
// turns an optional selector of its spec into a DeleteAllOf option passes
// it as client.MatchingLabelsSelector{Selector: labels.Nothing()} (and a
// MatchingLabelsSelector with a nil Selector becomes labels.Nothing() in
// controller-runtime). labels.Nothing().Add(...) returns Nothing, whose
// String() is "": the request then carried no label selector at all, and
// every ConfigMap of the namespace went (seen failing, others' included;
// for a long-named owner, every child of the owner). A DeleteAllOf whose
// options select nothing now deletes nothing (scoped.SelectsNothing).

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// nothingSelected is what a handler gets from an unset spec selector.
func nothingSelected(t *testing.T) client.MatchingLabelsSelector {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(nil)
	if err != nil {
		t.Fatal(err)
	}
	return client.MatchingLabelsSelector{Selector: sel}
}

// TestDeleteAllOfWithASelectorOfNothingNeverDeletesOthersObjects: the
// janitor's DeleteAllOf must delete "only the owner's children". With a
// caller's selector that selects nothing, the owner's labels are added to
// Nothing, which swallows them (and the scoped client's environment label),
// and the API server gets a deletecollection without a label selector.
// Safe behaviour: the ConfigMaps that are not the owner's stay (and, the
// caller having selected nothing, so do the owner's).
func TestDeleteAllOfWithASelectorOfNothingNeverDeletesOthersObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, ns := plane.For(t, "j-nothing-")
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, Labels: map[string]string{labels.Environment: "dev"}}}
	g.Expect(c.Create(ctx, w)).To(Succeed())
	j, err := janitor.New(scoped.New(c, "dev"), w)
	g.Expect(err).NotTo(HaveOccurred())

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}}
	_, err = j.CreateOrUpdate(ctx, cm, func() error { return nil })
	g.Expect(err).NotTo(HaveOccurred())
	// Not the owner's: a tenant's ConfigMap of the same environment, and
	// one without any label.
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tenant-dev", Namespace: ns,
		Labels: map[string]string{labels.Environment: "dev"}}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tenant-plain", Namespace: ns}})).To(Succeed())

	g.Expect(j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), nothingSelected(t))).To(Succeed())

	// DeleteAllOf is synchronous for objects without finalizers: what it
	// deleted is gone when it returns.
	for _, name := range []string{"tenant-dev", "tenant-plain"} {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		g.Expect(apierrors.IsNotFound(err)).To(BeFalse(),
			"the janitor's DeleteAllOf deleted ConfigMap %s, which is not the owner's child (caller's selector: labels.Nothing())", name)
	}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, &corev1.ConfigMap{})).To(Succeed(),
		"the caller selected nothing, yet the owner's child was deleted")
}

// TestDeleteAllOfOfALongNamedOwnerWithASelectorOfNothingDeletesNothing:
// the long-name path (the owner's name is no label value) lists the
// owner's children and adds the caller's requirements; Nothing has none
// (Requirements reports it not selectable), so every child of the owner is
// deleted although the caller selected none. docs/framework.md: "and of
// those only what the caller's options select".
func TestDeleteAllOfOfALongNamedOwnerWithASelectorOfNothingDeletesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, ns := plane.For(t, "j-nothing-long-")
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w-" + strings.Repeat("x", 70), Namespace: ns,
		Labels: map[string]string{labels.Environment: "dev"}}}
	g.Expect(c.Create(ctx, w)).To(Succeed())
	j, err := janitor.New(scoped.New(c, "dev"), w)
	g.Expect(err).NotTo(HaveOccurred())

	for _, name := range []string{"config", "cache"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		_, err := j.CreateOrUpdate(ctx, cm, func() error { return nil })
		g.Expect(err).NotTo(HaveOccurred())
	}

	g.Expect(j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), nothingSelected(t))).To(Succeed())

	left, err := testapi.LiveConfigMaps(ctx, c, ns, client.HasLabels{labels.OwnerUID})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(Equal([]string{"cache", "config"}),
		"the caller's selector selects nothing, so no child of the owner may be deleted")
}
