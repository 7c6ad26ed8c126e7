package spifferegistration

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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

// labelWeb sets labels on Deployment a/web.
func labelWeb(ctx context.Context, t *testing.T, e *env, kv map[string]string) {
	t.Helper()
	cur := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, cur); err != nil {
		t.Fatal(err)
	}
	for k, v := range kv {
		cur.Labels[k] = v
	}
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
}

// TestAYieldToAPolicyThatRendersKeepsTheFallbacksLastGoodEntry: the fallback
// keeps a last good entry for web (its render fails); main (judged)
// selects web and cannot render it. web's owner adds team: the fallback's
// pass before main's finds main renders web (claimHeld) and yields it,
// but only claimUnsure/claimPresumed carry the memo record, so end()
// drops web's last good entry. main's pass then finds SPIRE refusing its
// entry: main holds nothing for web, and the fallback has nothing left to
// register. Once web's pods roll, web holds no identity.
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
// web only in previous, carry finds nothing in byWorkload, and end() drops
// previous. SPIRE refuses main's entry, so main holds nothing for web; the
// fallback has no last good entry left. Without the edit, web keeps it.
func TestAFallbackEditKeepsACarriedLastGoodEntry(t *testing.T) {
	for _, edit := range []bool{false, true} {
		ctx := context.Background()
		e, fb := tierFallbackEnv(ctx, t)
		e.api.Reject["spiffe://example.org"+mainPay] = true
		main := storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = teamTemplate
			s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"sel": "main"}}
		})
		twoPasses(ctx, e, main, fb)
		if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
			t.Fatalf("precondition: SPIRE holds %v, want the fallback's last good entry for web", got)
		}
		labelWeb(ctx, t, e, map[string]string{"sel": "main", "team": "pay"})
		_ = e.h.CreateOrUpdate(ctx, fb) // yields web for a pass and carries it
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
