package janitor_test

// Attacks on the janitor's ownership rule by a tenant with full rights in
// one namespace. Fake client, no API server:
// go test -run TestAdversarial ./janitor/

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// TestAdversarialDeleteAllOfSparesALongNamedOwnersLookalike: the owner team-a/<253
// characters> has no owner-name label (a label cannot hold the name); its
// children carry the name in the trustplane.dev/owner-name annotation. A
// tenant labels objects of their own with the owner's UID, kind and
// namespace and either no name at all or an annotation naming another
// owner. Owns says neither is the owner's child, so the safe behaviour is
// that the janitor's DeleteAllOf, which "deletes only the owner's
// children", leaves both, as Cleanup and Withdraw do.
func TestAdversarialDeleteAllOfSparesALongNamedOwnersLookalike(t *testing.T) {
	ctx := context.Background()
	s := reviewScheme(t)
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	w := reviewWidget("team-a", long)
	mk := func(name string, ann map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: name, Annotations: ann, Labels: map[string]string{
			labels.Environment:    "dev",
			labels.OwnerUID:       string(w.UID),
			labels.OwnerKind:      "Widget",
			labels.OwnerNamespace: "team-a",
		}}}
	}
	lookalikes := []*corev1.ConfigMap{
		mk("unnamed", nil),
		mk("names-another", map[string]string{labels.OwnerNameAnnotation: "someone-else"}),
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(w, lookalikes[0], lookalikes[1]).Build()
	j, err := janitor.New(scoped.New(c, "dev"), w)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range lookalikes {
		if j.Owns(o) {
			t.Fatalf("precondition: Owns accepted %s", o.Name)
		}
	}
	if err := j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("team-b")); err != nil {
		t.Fatal(err)
	}
	var gone []string
	for _, o := range lookalikes {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			gone = append(gone, o.Name)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if len(gone) > 0 {
		t.Fatalf("DeleteAllOf of the long-named owner deleted %v, which Owns says are not its children", gone)
	}
}
