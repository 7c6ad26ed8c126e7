package spifferegistration

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestARestartKeepsACarriedLastGoodEntry: as
// TestAFallbackEditKeepsACarriedLastGoodEntry, with a restart in place of
// the edit. The fallback yields web (main renders it) and carries its last
// good entry; its status records it (keptEntries). After a restart, the
// fallback's first pass runs before main's: main is not judged and renders
// web (claimHeld), so carry is called, but carry reads only byWorkload and
// previous, never the status's records (memo.recorded): end() drops the
// record. SPIRE then refuses main's entry, main holds nothing for web, and
// the fallback has no last good entry left. Without the restart web keeps
// it: a restart changes what SPIRE holds.
func TestARestartKeepsACarriedLastGoodEntry(t *testing.T) {
	for _, restart := range []bool{false, true} {
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
		t.Logf("restart=%v: fallback keptEntries after the yield: %d", restart, len(fb.Status.KeptEntries))
		if restart {
			storeStatuses(ctx, t, e, main, fb)
			e.h = restarted(e)
			_ = e.h.CreateOrUpdate(ctx, fb) // the first pass after the start, before main's
			t.Logf("restart=%v: fallback keptEntries after the restart's first pass: %d", restart, len(fb.Status.KeptEntries))
		}
		rollWeb(ctx, t, e)
		for range 3 {
			_ = e.h.CreateOrUpdate(ctx, main)
			_ = e.h.CreateOrUpdate(ctx, fb)
		}
		got := paths(e.api)
		t.Logf("restart=%v: SPIRE holds %v", restart, got)
		if !slices.Equal(got, []string{tierFallbackWeb}) {
			t.Errorf("restart=%v: web holds %v: main's entry is refused and main holds nothing for web, yet the fallback's carried last good entry "+
				"(recorded in its status) is gone after the restart", restart, got)
		}
	}
}
