package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// carriedEnv: Deployment a/web (tier=x, team=pay, pod web-1) and a
// fallback whose template names tier. The fallback registers tier/x; then
// a policy main that renders web (team) takes it, web's pods roll, and
// the fallback's entry leaves SPIRE. web's owner then removes tier (the
// fallback's render of web would now fail), and passes run for a while.
func carriedEnv(ctx context.Context, t *testing.T) (*env, *v1alpha1.SpiffeRegistration, *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e, fb := webUnderTierFallback(ctx, t, map[string]string{"team": "pay"})
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	twoPasses(ctx, e, main, fb)
	rollWeb(ctx, t, e)
	twoPasses(ctx, e, main, fb)
	if got := paths(e.api); !slices.Equal(got, []string{mainPay}) {
		t.Fatalf("precondition: SPIRE holds %v, want main's entry for web alone", got)
	}
	setLabelOf(ctx, t, e, "web", "tier", "")
	twoPasses(ctx, e, main, fb)
	if got := paths(e.api); !slices.Equal(got, []string{mainPay}) {
		t.Fatalf("precondition: SPIRE holds %v, want main's entry for web alone", got)
	}
	return e, main, fb
}

// deleteMain deletes policy main as the operator does.
func deleteMain(ctx context.Context, t *testing.T, e *env, main *v1alpha1.SpiffeRegistration) {
	t.Helper()
	if err := e.h.Delete(ctx, main); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
}

// TestAYieldedWorkloadGetsBackNoIdentityItNoLongerHeld: the
// fallback yields web to main for good and carries web's render (tier/x)
// pass after pass. web's owner removes tier meanwhile; the fallback's
// tier/x entry has long left SPIRE. When main is deleted, the fallback's
// re-render of web fails and takes the carried render as its "last good"
// entry, minting tier/x again: an identity web has not held for many
// passes and whose label it no longer has. After a restart (the carried
// render is in no keptEntries record) web gets nothing: what SPIRE holds
// depends on whether the operator restarted.
func TestAYieldedWorkloadGetsBackNoIdentityItNoLongerHeld(t *testing.T) {
	ctx := context.Background()
	outcome := map[bool][]string{}
	for _, restart := range []bool{false, true} {
		e, main, fb := carriedEnv(ctx, t)
		if restart {
			storeStatuses(ctx, t, e, main, fb)
			e.h = restarted(e)
		}
		deleteMain(ctx, t, e, main)
		for range 2 {
			_ = e.h.CreateOrUpdate(ctx, fb)
		}
		outcome[restart] = paths(e.api)
	}
	t.Logf("without a restart SPIRE holds %v; after a restart %v", outcome[false], outcome[true])
	if !slices.Equal(outcome[false], outcome[true]) {
		t.Errorf("once main goes, a restart changes what the fallback registers for web: without one %v, after one %v", outcome[false], outcome[true])
	}
	if slices.Contains(outcome[false], tierFallbackWeb) {
		t.Errorf("%s", fmt.Sprintf("the fallback re-minted %s for web from a render it carried while main held web, though web lost tier since and held no fallback entry", tierFallbackWeb))
	}
}
