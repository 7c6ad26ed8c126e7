package controller_test

// Attacks of a tenant with full rights on IdentityBindings and workloads in
// one namespace (finalizers, environment labels) on the rule of one output
// per group. They drive common/controller's
// Controller around the real handler against controller-runtime's fake
// client (helpers of lifecycle_adversarial_test.go); no API server.

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	commonctrl "github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

func attackGet(t *testing.T, c client.Client, key types.NamespacedName) *v1alpha1.IdentityBinding {
	t.Helper()
	b := &v1alpha1.IdentityBinding{}
	if err := c.Get(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func attackEdit(t *testing.T, c client.Client, key types.NamespacedName, edit func(*v1alpha1.IdentityBinding)) {
	t.Helper()
	b := attackGet(t, c, key)
	edit(b)
	if err := c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// secondBindingOutput creates the binding b2 of team, in prod on the pool
// llm2 (same service account and variant as b1, another SPIFFE ID), gives
// it three passes of op and returns its output, nil when it wrote none.
func secondBindingOutput(t *testing.T, c client.Client, op *commonctrl.Controller[*v1alpha1.IdentityBinding]) *spiffev1alpha1.SpiffeEntry {
	t.Helper()
	b2 := attackBindingIn("team", "b2", "prod", "llm2")
	if err := c.Create(context.Background(), b2); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		attackReconcile(t, op, client.ObjectKeyFromObject(b2))
	}
	return attackEntry(t, c, "team", "b2")
}

// TestAdversarialStrippedFinalizerLeavesNoSecondOutputInTheGroup: the tenant
// removes the operator's finalizer from a Ready binding and deletes it, so
// no Delete pass withdraws its SpiffeEntry (left to the orphan sweep, up to
// 5 minutes). It then creates a binding of the same namespace, service
// account and variant on another pool (another SPIFFE ID). Safe behaviour
// (at most one identity per group, "a former member writes again only
// after the others' outputs are gone"): the new binding writes no output
// while the orphan still selects the same pods.
func TestAdversarialStrippedFinalizerLeavesNoSecondOutputInTheGroup(t *testing.T) {
	b1 := attackBindingIn("team", "b1", "prod", "llm")
	c := attackFakeClient(t, nil, b1, attackPool("team", "llm"), attackPool("team", "llm2"))
	op := attackOperator(t, c, "prod", "prod", parentID, "prod")
	k1 := client.ObjectKeyFromObject(b1)
	attackReconcile(t, op, k1)
	if attackEntry(t, c, "team", "b1") == nil {
		t.Fatal("precondition: b1 has no output")
	}
	// Finalizer game: delete, then strip the finalizer before any pass.
	if err := c.Delete(context.Background(), attackGet(t, c, k1)); err != nil {
		t.Fatal(err)
	}
	attackEdit(t, c, k1, func(b *v1alpha1.IdentityBinding) { b.Finalizers = nil })
	if attackEntry(t, c, "team", "b1") == nil {
		t.Fatal("precondition: the orphan output is gone already")
	}
	if e := secondBindingOutput(t, c, op); e != nil {
		t.Fatalf("b2 wrote %s beside the orphan of b1: two identities (%s and %s) for the pods of one group",
			e.Name, e.Spec.SpiffeID, attackEntry(t, c, "team", "b1").Spec.SpiffeID)
	}
}

// TestAdversarialGhostEnvironmentOutputStillBlocksItsOldGroup: the tenant moves
// a Ready binding to an environment no instance reconciles ("ghost"), so
// its output stays as written, then edits its variant: the binding now
// sits in another group while its output still selects the old one. A
// second binding in the old group (another pool, so another SPIFFE ID) is
// created in prod. Safe behaviour: the second binding writes nothing
// while the stale output selects the same pods.
func TestAdversarialGhostEnvironmentOutputStillBlocksItsOldGroup(t *testing.T) {
	b1 := attackBindingIn("team", "b1", "prod", "llm")
	c := attackFakeClient(t, nil, b1, attackPool("team", "llm"), attackPool("team", "llm2"))
	op := attackOperator(t, c, "prod", "prod", parentID, "prod")
	k1 := client.ObjectKeyFromObject(b1)
	attackReconcile(t, op, k1)
	if attackEntry(t, c, "team", "b1") == nil {
		t.Fatal("precondition: b1 has no output")
	}
	attackEdit(t, c, k1, func(b *v1alpha1.IdentityBinding) { b.Labels[labels.Environment] = "ghost" })
	attackReconcile(t, op, k1)
	attackEdit(t, c, k1, func(b *v1alpha1.IdentityBinding) { b.Spec.IdentityBoundary.Variant = "v2" })
	attackReconcile(t, op, k1)
	if attackEntry(t, c, "team", "b1") == nil {
		t.Fatal("precondition: the ghost output is gone")
	}
	if e := secondBindingOutput(t, c, op); e != nil {
		t.Fatalf("b2 wrote %s (%s) while b1's stale output (%s) selects the same pods", e.Name, e.Spec.SpiffeID, attackEntry(t, c, "team", "b1").Spec.SpiffeID)
	}
}
