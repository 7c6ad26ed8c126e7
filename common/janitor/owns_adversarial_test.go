package janitor_test

// Review of commit 379559d (Owns: owner labels must parse exactly to the
// owner). These tests use the controller-runtime fake client and start no
// API server: run them with `go test -run TestAdversarial ./janitor/`.

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

func reviewScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := widget.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func reviewWidget(ns, name string) *widgetv1.Widget {
	return &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name[:min(len(name), 8)]),
		Labels: map[string]string{labels.Environment: "dev"}}}
}

// TestAdversarialDeleteAllOfSparesObjectsOwnsRejects: after 379559d an object
// whose labels pair the owner's UID and kind with ANOTHER owner's namespace
// and name is not the owner's child (Owns is false: Claim reports it in the
// way, Cleanup and Withdraw leave it). The janitor's DeleteAllOf
// (bykey.go:64) still selects by owner-uid and owner-kind only, so it
// deletes that very object: the two ownership rules of one client disagree.
func TestAdversarialDeleteAllOfSparesObjectsOwnsRejects(t *testing.T) {
	ctx := context.Background()
	s := reviewScheme(t)
	w := reviewWidget("team-a", "w")
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "not-yours", Labels: map[string]string{
		labels.Environment:    "dev",
		labels.OwnerUID:       string(w.UID),
		labels.OwnerKind:      "Widget",
		labels.OwnerNamespace: "team-b",
		labels.OwnerName:      "other",
	}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(w, foreign).Build()
	j, err := janitor.New(scoped.New(c, "dev"), w)
	if err != nil {
		t.Fatal(err)
	}
	if j.Owns(foreign) {
		t.Fatalf("precondition: Owns accepted labels naming team-b/other")
	}
	if err := j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("team-b")); err != nil {
		t.Fatal(err)
	}
	err = c.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		t.Fatalf("DeleteAllOf deleted %s, which Owns says is not a child of Widget team-a/w (its labels name team-b/other)", client.ObjectKeyFromObject(foreign))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestAdversarialOwnsChildrenSetOwnershipWrote (soundness): whatever
// SetOwnership writes, Owns reads back, without an owner reference (a
// cross-namespace child) for a short name, a 63-character name, a name
// with dots, and a 253-character name (annotation); and for a
// cluster-scoped owner (no owner-namespace label).
func TestAdversarialOwnsChildrenSetOwnershipWrote(t *testing.T) {
	s := reviewScheme(t)
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	owners := []client.Object{
		reviewWidget("team-a", "w"),
		reviewWidget("team-a", strings.Repeat("x", 63)),
		reviewWidget("team-a", "a.b-c"),
		reviewWidget("team-a", long),
		reviewWidget("team-a", strings.Repeat("y", 64)),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-owner", UID: "uid-ns"}},
	}
	for _, o := range owners {
		c := fake.NewClientBuilder().WithScheme(s).Build()
		j, err := janitor.New(scoped.New(c, "dev"), o)
		if err != nil {
			t.Fatal(err)
		}
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "child"}}
		if err := j.SetOwnership(child); err != nil {
			t.Fatal(err)
		}
		child.SetOwnerReferences(nil) // as a cross-namespace child, by labels only
		if !j.Owns(child) {
			t.Errorf("owner %s/%s (%d chars): Owns rejected the child SetOwnership marked: labels %v annotations %v",
				o.GetNamespace(), o.GetName(), len(o.GetName()), child.GetLabels(), child.GetAnnotations())
		}
		// A janitor of an owner with the same UID but another name
		// (a stub) does not own it.
		stub := o.DeepCopyObject().(client.Object)
		stub.SetName(o.GetName() + "z")
		js, err := janitor.New(scoped.New(c, "dev"), stub)
		if err != nil {
			t.Fatal(err)
		}
		if js.Owns(child) {
			t.Errorf("owner %q: a stub named %q with the same UID owns the child", o.GetName(), stub.GetName())
		}
	}
}

// TestAdversarialOwnsIgnoresAnnotationWhenLabelNamesOwner (soundness): a copied
// annotation cannot override the owner-name label.
func TestAdversarialOwnsIgnoresAnnotationWhenLabelNamesOwner(t *testing.T) {
	s := reviewScheme(t)
	w := reviewWidget("team-a", "w")
	c := fake.NewClientBuilder().WithScheme(s).Build()
	j, err := janitor.New(scoped.New(c, "dev"), w)
	if err != nil {
		t.Fatal(err)
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "y",
		Labels:      map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerNamespace: "team-a", labels.OwnerName: "other"},
		Annotations: map[string]string{labels.OwnerNameAnnotation: "w"}}}
	if j.Owns(obj) {
		t.Fatalf("the annotation overrode the owner-name label")
	}
}
