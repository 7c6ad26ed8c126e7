package controller_test

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// TestAdversarialConflictAcrossEnvironmentsIsStillSeen: guarantee 1, "identity
// conflicts are evaluated across every environment". A tenant creates two
// bindings with the same pool, service account and boundary in one
// namespace, b1 labelled prod and b2 labelled staging, each reconciled only
// by its own instance (--environments=prod / staging). Safe behaviour:
// the two do not both get an output for the same identity: at least one
// reports the Conflict condition and at most one output is written.
func TestAdversarialConflictAcrossEnvironmentsIsStillSeen(t *testing.T) {
	b1 := attackBindingIn("team", "b1", "prod", "llm")
	b2 := attackBindingIn("team", "b2", "staging", "llm")
	c := attackFakeClient(t, nil, b1, b2, attackPool("team", "llm"))
	prod := attackOperator(t, c, "prod", "prod", parentID, "prod")
	staging := attackOperator(t, c, "staging", "staging", parentID, "staging")
	for range 2 {
		attackReconcile(t, prod, client.ObjectKeyFromObject(b1))
		attackReconcile(t, staging, client.ObjectKeyFromObject(b2))
		attackReconcile(t, prod, client.ObjectKeyFromObject(b2)) // skipped
		attackReconcile(t, staging, client.ObjectKeyFromObject(b1))
	}
	outputs, conflicts := 0, 0
	ids := []string{}
	for _, b := range []*v1alpha1.IdentityBinding{b1, b2} {
		if e := attackEntry(t, c, "team", b.Name); e != nil {
			outputs++
			ids = append(ids, e.Spec.SpiffeID)
		}
		cur := &v1alpha1.IdentityBinding{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), cur); err != nil {
			t.Fatal(err)
		}
		if cd := condition.Find(cur, v1alpha1.ConditionConflict); cd != nil && cd.Status == "True" {
			conflicts++
		}
	}
	if conflicts == 0 || (outputs == 2 && ids[0] == ids[1]) {
		t.Fatalf("two bindings of one identity in different environments: %d outputs %v, %d report Conflict", outputs, ids, conflicts)
	}
}
