package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// TestAnOutputForgedWithALiveBindingsUIDDoesNotGetItsOutputsSwept: the
// sweep withdraws by the UID an output's labels give. An object labelled
// with the UID of a live binding and a namespace/name where no binding
// exists (copied or invented by whoever may create or label an output
// kind) made the leader delete the live binding's real outputs, since the
// sweep judged the owner gone by that namespace and name. Against a real
// API server: spec "Outputs whose binding is gone", forged owner labels.
func TestAnOutputForgedWithALiveBindingsUIDDoesNotGetItsOutputsSwept(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, spiffev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	const victimUID = types.UID("0f0f0f0f-1111-2222-3333-444444444444")
	victim := &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "payments", UID: victimUID}}
	entry := func(name string, l map[string]string) *spiffev1alpha1.SpiffeEntry {
		return &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
			Spec: spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/ns/prod/sa/payments", ParentID: "spiffe://example.org/k8s-cluster-nodes", Selectors: []string{"k8s:ns:prod"}}}
	}
	// The live binding's real output, as the handler labels it.
	real := entry("prod-payments", labels.Owner(victim, ownerKind))
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		// The forged object: the victim's UID, an owner namespace/name where
		// no binding exists.
		forged := entry(fmt.Sprintf("zz-forged-%d", round), map[string]string{
			labels.OwnerKind: ownerKind, labels.OwnerNamespace: "attacker", labels.OwnerName: "nobody",
			labels.OwnerUID: string(victimUID)})
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(victim, real.DeepCopy(), forged).Build()
		sw := &orphanSweeper{client: c, apiReader: c, kinds: []output.Kind{output.KindSpiffeEntry}, log: logr.Discard()}
		if _, err := sw.sweep(ctx); err != nil {
			t.Fatal(err)
		}
		err := c.Get(ctx, client.ObjectKeyFromObject(real), &spiffev1alpha1.SpiffeEntry{})
		if apierrors.IsNotFound(err) {
			t.Fatalf("round %d: the live binding %s/%s (uid %s) still exists, yet the orphan sweep deleted its output %s "+
				"because an object it did not create named the binding's UID under another owner namespace/name",
				round, victim.Namespace, victim.Name, victimUID, real.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
