package spifferegistration

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// editFallback bumps the fallback's generation with an edit that leaves its
// template alone (a new hint), stored and in hand.
func editFallback(ctx context.Context, t *testing.T, e *env, fb *v1alpha1.SpiffeRegistration) {
	t.Helper()
	stored := &v1alpha1.SpiffeRegistration{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: fb.Name}, stored); err != nil {
		t.Fatal(err)
	}
	stored.Spec.Hint = "edited"
	if err := e.c.Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	fb.Spec.Hint = "edited"
	fb.Generation++
}

// webMovedIntoARefusedMain is tierFallbackEnv with a policy main that
// selects workloads labelled sel=main and whose entry for web SPIRE
// refuses: web's writer gives it sel=main and team=pay together, and the
// fallback's pass (before main's) yields web and carries its last good
// entry.
func webMovedIntoARefusedMain(ctx context.Context, t *testing.T) (e *env, main, fb *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e, fb = tierFallbackEnv(ctx, t)
	e.api.Reject["spiffe://example.org"+mainPay] = true
	main = storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = teamTemplate
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"sel": "main"}}
	})
	twoPasses(ctx, e, main, fb)
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's last good entry for web", got)
	}
	setLabelOf(ctx, t, e, "web", "sel", "main")
	setLabelOf(ctx, t, e, "web", "team", "pay")
	_ = e.h.CreateOrUpdate(ctx, fb) // yields web for a pass and carries it
	return e, main, fb
}

// TestAYieldToAPolicyThatRendersKeepsTheFallbacksLastGoodEntry: the fallback
// keeps a last good entry for web (its render fails); main (judged)
// selects web and cannot render it. web's owner adds team: the fallback's
// pass before main's finds main renders web (claimHeld) and yields it.
// Only claimUnsure/claimPresumed carried the memo record, so end() dropped
// web's last good entry; main's pass then found SPIRE refusing its entry:
// main held nothing for web, the fallback had nothing left to register,
// and once web's pods rolled web held no identity (seen failing).
func TestAYieldToAPolicyThatRendersKeepsTheFallbacksLastGoodEntry(t *testing.T) {
	ctx := context.Background()
	e, fb := tierFallbackEnv(ctx, t)
	e.api.Reject["spiffe://example.org"+mainPay] = true
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	twoPasses(ctx, e, main, fb)
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's last good entry for web", got)
	}
	setTeam(ctx, t, e, "pay")
	_ = e.h.CreateOrUpdate(ctx, fb) // yields web for a pass: main renders it
	rollWeb(ctx, t, e)
	for range 3 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Errorf("web holds %v: SPIRE refuses main's entry (main holds nothing for web), yet the fallback's last good entry for web is gone "+
			"(fallback failures %+v)", got, fb.Status.Failures)
	}
}

// TestAFallbackEditKeepsACarriedLastGoodEntry: as
// TestAWorkloadThatMovesIntoAPolicyKeepsTheFallbacksLastGoodEntry, but web
// moves into main already rendering there (sel=main and team together):
// the fallback's pass before main's yields web (claimPresumed, main
// renders it) and carries its last good entry. The fallback is then edited
// (a hint) and passes again before main: its new generation's memo holds
// web only in previous. carry looked only in byWorkload, and end() dropped
// previous; SPIRE refuses main's entry, so main held nothing for web and
// the fallback no last good entry (seen failing). Without the edit, web
// kept it.
func TestAFallbackEditKeepsACarriedLastGoodEntry(t *testing.T) {
	for _, edit := range []bool{false, true} {
		ctx := context.Background()
		e, main, fb := webMovedIntoARefusedMain(ctx, t)
		if edit {
			editFallback(ctx, t, e, fb)
			_ = e.h.CreateOrUpdate(ctx, fb) // a second pass before main's
		}
		rollWeb(ctx, t, e)
		for range 3 {
			_ = e.h.CreateOrUpdate(ctx, main)
			_ = e.h.CreateOrUpdate(ctx, fb)
		}
		got := paths(e.api)
		t.Logf("edit=%v: SPIRE holds %v", edit, got)
		if !slices.Equal(got, []string{tierFallbackWeb}) {
			t.Errorf("edit=%v: web holds %v: main's entry is refused and main holds nothing for web, yet the fallback's last good entry for web is gone", edit, got)
		}
	}
}
