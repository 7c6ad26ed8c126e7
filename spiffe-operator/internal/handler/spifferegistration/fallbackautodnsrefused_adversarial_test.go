package spifferegistration

import (
	"context"
	"slices"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// autoDNSRefusedEnv: main (autoPopulateDNSNames) renders a/web but SPIRE
// refuses its entry, so the fallback keeps a/web; both converged.
func autoDNSRefusedEnv(ctx context.Context, t *testing.T) (e *env, main, fb *v1alpha1.SpiffeRegistration) {
	t.Helper()
	webL := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", webL)
	d.Labels["team"] = "pay"
	e = retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, runningPod("a", "web-1", "web", "", webL))
	e.api.Reject["spiffe://example.org"+mainPay] = true
	fb = storedFallback(ctx, t, e)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	main = newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = teamTemplate
		s.AutoPopulateDNSNames = true
	})
	main.Name, main.Generation, main.UID = "main", 1, k8stypes.UID("uid-policy-main")
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) || fb.Status.WorkloadsSelected != 1 {
		t.Fatalf("precondition: SPIRE holds %v, fallback registers %d", got, fb.Status.WorkloadsSelected)
	}
	return e, main, fb
}

// TestAnAutoDNSPolicyWithARefusedEntryWakesTheFallbackOnlyOnAChange: an
// autoDNS policy never rebuilds its memo, so memo.spireFailed stays empty;
// each full pass first publishes its failed set without the refused
// workload (handler.go, after memo.end) and then with it (after Sync): the
// set flips twice and every fallback of the class is woken twice per pass,
// although nothing changed.
func TestAnAutoDNSPolicyWithARefusedEntryWakesTheFallbackOnlyOnAChange(t *testing.T) {
	ctx := context.Background()
	e, main, _ := autoDNSRefusedEnv(ctx, t)
	woken := 0
	e.h.Notify = func(entrysync.Owner) { woken++ }
	for range 3 {
		_ = e.h.CreateOrUpdate(ctx, main)
	}
	if woken != 0 {
		t.Errorf("3 passes of main with nothing changed woke the fallback %d times", woken)
	}
}

// TestAFallbackPassDuringAnAutoDNSPolicysSyncKeepsARefusedWorkload: a
// fallback pass that runs while main talks to SPIRE (it is woken then,
// and runs on another worker) reads main's failed set without the refused
// workload, and yields a/web to main, which holds nothing for it.
func TestAFallbackPassDuringAnAutoDNSPolicysSyncKeepsARefusedWorkload(t *testing.T) {
	ctx := context.Background()
	e, main, fb := autoDNSRefusedEnv(ctx, t)
	var during int32 = -1
	e.h.Notify = func(entrysync.Owner) {
		if during >= 0 {
			return
		}
		f := fb.DeepCopy()
		_ = e.h.CreateOrUpdate(ctx, f)
		during = f.Status.WorkloadsSelected
	}
	_ = e.h.CreateOrUpdate(ctx, main)
	if during == 0 {
		t.Errorf("a fallback pass woken by main's pass registers no workload: it yielded a/web to main, whose entry SPIRE refuses (SPIRE holds %v)", paths(e.api))
	}
}
