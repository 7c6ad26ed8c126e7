package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// siblingsEnv: Deployments a/api and a/web both run as service account
// shop (pods api-1, web-1). Policy main (team template) selects api only;
// the fallback (ns/sa template, so one entry for both) selects both.
// The history: api first has no team label (the fallback registers the
// shop entry for both), then gets one (main registers api, the fallback
// yields api and leaves web unregistered, its entry retained for the
// running pods), then loses it (main keeps api's last good entry).
func siblingsEnv(ctx context.Context, t *testing.T, autoDNS bool) (e *env, main, fb *v1alpha1.SpiffeRegistration, pass func()) {
	t.Helper()
	apiL := map[string]string{"app": "api"}
	webL := map[string]string{"app": "web"}
	api := deploy("a", "api", "shop", apiL)
	api.UID = "uid-api"
	web := deploy("a", "web", "shop", webL)
	web.UID = "uid-web"
	e = retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), api, web,
		runningPod("a", "api-1", "shop", "", apiL), runningPod("a", "web-1", "shop", "", webL))
	main = newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = teamTemplate
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: apiL}
	})
	main.Name, main.Generation, main.UID = "main", 1, "uid-policy-main"
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	fb = newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
		s.AutoPopulateDNSNames = autoDNS
	})
	fb.Name, fb.Generation, fb.UID = "fallback", 1, "uid-policy-fallback"
	if err := e.c.Create(ctx, fb.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	pass = func() {
		t.Helper()
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	pass()
	pass()
	if got := sortedPaths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/shop"}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's shop entry alone", got)
	}
	setTeamOf(ctx, t, e, "api", "pay")
	pass()
	pass()
	if !slices.ContainsFunc(fb.Status.Failures, func(f v1alpha1.Failure) bool {
		return f.Object == "Deployment a/web" && f.Reason == ReasonSharesPodsWithAnotherPolicy
	}) {
		t.Fatalf("precondition: the fallback should leave web unregistered once main renders api: failures %+v", fb.Status.Failures)
	}
	setTeamOf(ctx, t, e, "api", "")
	pass()
	pass()
	if got := main.Status.KeptEntries; len(got) != 1 {
		t.Fatalf("precondition: main should keep api's last good entry, keptEntries %+v", got)
	}
	return e, main, fb, pass
}

// rollSiblings replaces api-1 and web-1 by api-2 and web-2.
func rollSiblings(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	for _, n := range []string{"api", "web"} {
		l := map[string]string{"app": n}
		if err := e.c.Delete(ctx, runningPod("a", n+"-1", "shop", "", l)); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Create(ctx, runningPod("a", n+"-2", "shop", "", l)); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAPIOneIdentity fails when api's new pod holds main's kept entry and
// the fallback's shop entry.
func checkAPIOneIdentity(t *testing.T, e *env, fb *v1alpha1.SpiffeRegistration, what string) {
	t.Helper()
	got := selectingPod(e.api.All(), "a", "shop", map[string]string{"app": "api"})
	if len(got) > 1 || !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, mainPay+" ") }) {
		t.Errorf("%s: Deployment a/api, for which main keeps its last good entry, has new pod api-2 selected by %v "+
			"(the fallback registers web, same service account, with an entry selecting every pod of shop); "+
			"fallback workloadsSelected=%d failures=%+v", what, got, fb.Status.WorkloadsSelected, fb.Status.Failures)
	}
}

// TestAKeptEntryKeepsItsSiblingOffWithoutARestart: the same history without a
// restart: the fallback's memo.keys says it has no entry for api, so web
// stays unregistered and api's new pod holds main's identity alone.
func TestAKeptEntryKeepsItsSiblingOffWithoutARestart(t *testing.T) {
	ctx := context.Background()
	e, _, fb, pass := siblingsEnv(ctx, t, false)
	rollSiblings(ctx, t, e)
	pass()
	pass()
	checkAPIOneIdentity(t, e, fb, "without a restart")
}

// TestARestartLetsNoRetainedEntryJoinAKeptOne: after a restart the
// fallback's keepsOwn asks SPIRE whether it holds its entry for api. The
// shop entry is there only because it is retained for web-1 (the fallback
// does not want it), but its key is also the key of the fallback's render
// of api, so keepsOwn says the fallback keeps api's entry: api (claimPresumed,
// not rendering) is not surelyHeld, web is no longer blocked and the
// fallback wants the shop entry again. From then on memo.keys holds that
// key, so it keeps saying so: api's pods hold main's kept identity and the
// fallback's for good.
func TestARestartLetsNoRetainedEntryJoinAKeptOne(t *testing.T) {
	ctx := context.Background()
	e, main, fb, _ := siblingsEnv(ctx, t, false)
	storeStatuses(ctx, t, e, main, fb)
	e.h = restarted(e)
	pass := func() {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	pass()
	rollSiblings(ctx, t, e)
	pass()
	pass()
	checkAPIOneIdentity(t, e, fb, "after a restart")
}

// TestAnAutoDNSFallbackLetsNoRetainedEntryJoinAKeptOne: a fallback
// with autoPopulateDNSNames never rebuilds memo.keys, so keepsOwn asks
// SPIRE on every pass, no restart needed: the shop entry retained for
// web-1 makes it say the fallback keeps api's entry.
func TestAnAutoDNSFallbackLetsNoRetainedEntryJoinAKeptOne(t *testing.T) {
	ctx := context.Background()
	e, _, fb, pass := siblingsEnv(ctx, t, true)
	rollSiblings(ctx, t, e)
	pass()
	pass()
	checkAPIOneIdentity(t, e, fb, "autoDNS fallback, no restart")
}

// TestAFallbackEditLetsNoRetainedEntryJoinAKeptOne: an edit of the
// fallback's spec (a new generation) drops its memo, so keepsOwn asks
// SPIRE again, as after a restart.
func TestAFallbackEditLetsNoRetainedEntryJoinAKeptOne(t *testing.T) {
	ctx := context.Background()
	e, _, fb, pass := siblingsEnv(ctx, t, false)
	fb.Generation = 2
	fb.Spec.Hint = "edited"
	pass()
	rollSiblings(ctx, t, e)
	pass()
	pass()
	checkAPIOneIdentity(t, e, fb, "after an edit of the fallback")
}

// TestAFailedFallbackPassLeavesNoStaleKeys: no pod runs (scaled to
// zero). The fallback registers the shop entry for api and web. api gets
// its team label and main registers it; the fallback's pass then fails
// (SPIRE unavailable), so memo.keys still holds the shop key from the pass
// before. api loses its label (main keeps its last good entry): the
// fallback's next pass reads the stale keys, finds it "keeps" api's entry,
// so web is not blocked and the shop entry is wanted again, for good. The
// pods started afterwards hold two identities.
func TestAFailedFallbackPassLeavesNoStaleKeys(t *testing.T) { afterAFallbackPass(t, true) }

// TestAKeptEntryKeepsItsSiblingOffWhileSPIREIsUp: the same history with SPIRE up holds.
func TestAKeptEntryKeepsItsSiblingOffWhileSPIREIsUp(t *testing.T) { afterAFallbackPass(t, false) }

func afterAFallbackPass(t *testing.T, down bool) {
	ctx := context.Background()
	apiL := map[string]string{"app": "api"}
	webL := map[string]string{"app": "web"}
	api := deploy("a", "api", "shop", apiL)
	api.UID = "uid-api"
	web := deploy("a", "web", "shop", webL)
	web.UID = "uid-web"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), api, web)
	main := storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = teamTemplate
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: apiL}
	})
	fb := storedFallback(ctx, t, e)
	pass := func() {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	pass()
	pass()
	if got := sortedPaths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/shop"}) {
		t.Fatalf("precondition: SPIRE holds %v", got)
	}
	setTeamOf(ctx, t, e, "api", "pay")
	if err := e.h.CreateOrUpdate(ctx, main); err != nil {
		t.Fatalf("main's pass: %v", err)
	}
	e.api.SetUnavailable(down)
	if err := e.h.CreateOrUpdate(ctx, fb); down && err == nil {
		t.Fatalf("precondition: the fallback's pass should fail while SPIRE is unavailable")
	}
	e.api.SetUnavailable(false)
	setTeamOf(ctx, t, e, "api", "")
	pass()
	pass()
	if err := e.c.Create(ctx, runningPod("a", "api-2", "shop", "", apiL)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("a", "web-2", "shop", "", webL)); err != nil {
		t.Fatal(err)
	}
	pass()
	pass()
	checkAPIOneIdentity(t, e, fb, "after one failed fallback pass")
}
