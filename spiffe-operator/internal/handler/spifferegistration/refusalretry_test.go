package spifferegistration

import (
	"context"
	"slices"
	"testing"
)

// TestASecondTemplateChangeSpireAlsoRefusesLeavesTheRunningPodItsEntry:
// as in TestATemplateChangeWhoseNewEntryIsRefusedLeavesTheRunningPodItsEntry,
// the admin moves the account's identity to per-workload identities and
// SPIRE refuses the new entry of "ab--x" (its DNS name); the old entry
// stays for the running pod. The admin then tries another SPIFFE ID
// template; SPIRE refuses that entry too (the DNS name is unchanged). The
// pod still runs and SPIRE still holds nothing else for it: the old entry
// must stay as it did through the first refusal.
func TestASecondTemplateChangeSpireAlsoRefusesLeavesTheRunningPodItsEntry(t *testing.T) {
	ctx := context.Background()
	e, p := abxUnderTheAccountsEntry(ctx, t)
	perWorkloadIdentities(&p.Spec)
	p.Generation++
	passes(ctx, e.h, p, 2)
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/shop"}) {
		t.Fatalf("first refused change: entries = %v (failures %+v)", got, p.Status.Failures)
	}
	p.Spec.SpiffeIDTemplate = "ns/{namespace}/w/{name}"
	p.Generation++
	passes(ctx, e.h, p, 2)
	if got := paths(e.api); len(got) == 0 {
		t.Errorf("the pod of ab--x runs and the entry meant to serve it is refused again, yet SPIRE holds no entry "+
			"for it: %v (failures %+v)", got, p.Status.Failures)
	}
}
