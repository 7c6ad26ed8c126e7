package controller

// Review of commit 379559d (orphans.go withdraws per distinct namespace,
// name and UID the outputs' labels name). Fake client, no API server:
// go test -run TestAdversarial ./internal/controller/

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

func reviewEntry(name string, l map[string]string, a map[string]string) *spiffev1alpha1.SpiffeEntry {
	return &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: a},
		Spec: spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/ns/prod/sa/x/y", ParentID: "spiffe://example.org/nodes", Selectors: []string{"k8s:ns:prod"}}}
}

func reviewSweep(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, spiffev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	sw := &orphanSweeper{client: c, apiReader: c, kinds: []output.Kind{output.KindSpiffeEntry}, log: logr.Discard()}
	if _, err := sw.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func reviewGone(t *testing.T, c client.Client, o client.Object) bool {
	t.Helper()
	err := c.Get(context.Background(), client.ObjectKeyFromObject(o), &spiffev1alpha1.SpiffeEntry{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// TestAdversarialEveryOwnerAGoneUIDIsNamedUnderIsWithdrawn (soundness): outputs
// that name a gone binding's UID under two namespace/name pairs (the real
// one, and one copied or forged) are all withdrawn, the real one with the
// name in the annotation included; an output of a live binding stays.
func TestAdversarialEveryOwnerAGoneUIDIsNamedUnderIsWithdrawn(t *testing.T) {
	long := strings.Repeat("b", 100)
	gone := &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: long, UID: "gone-uid"}}
	live := &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "live", UID: "live-uid"}}
	realOut := reviewEntry("real", labels.Owner(gone, ownerKind), labels.OwnerAnnotations(gone))
	forged := reviewEntry("forged", map[string]string{labels.OwnerKind: ownerKind, labels.OwnerUID: "gone-uid",
		labels.OwnerNamespace: "elsewhere", labels.OwnerName: "other"}, nil)
	liveOut := reviewEntry("live", labels.Owner(live, ownerKind), nil)
	c := reviewSweep(t, live, realOut, forged, liveOut)
	if !reviewGone(t, c, realOut) || !reviewGone(t, c, forged) {
		t.Fatalf("outputs of the gone binding left: real gone=%v forged gone=%v", reviewGone(t, c, realOut), reviewGone(t, c, forged))
	}
	if reviewGone(t, c, liveOut) {
		t.Fatal("the live binding's output was swept")
	}
}
