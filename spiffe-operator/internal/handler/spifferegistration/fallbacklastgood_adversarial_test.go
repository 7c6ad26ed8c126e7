package spifferegistration

import (
	"context"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

const tierFallbackWeb = "/fallback/ns/a/sa/web/tier/x"

// tierFallbackEnv: Deployment a/web (tier=x, a running pod web-1) and a
// stored fallback whose template names the tier label. After its first
// pass, tier is removed: the fallback's render of web fails and it keeps
// its last good entry.
func tierFallbackEnv(ctx context.Context, t *testing.T) (*env, *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e, fb := webUnderTierFallback(ctx, t, nil)
	setLabelOf(ctx, t, e, "web", "tier", "")
	_ = e.h.CreateOrUpdate(ctx, fb)
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's last good entry for web", got)
	}
	return e, fb
}

// webUnderTierFallback stores Deployment a/web (UID uid-web, labels tier=x
// and extra, a running pod) and a fallback policy whose SPIFFE ID names
// the tier label, and runs the fallback's first pass, which registers web.
func webUnderTierFallback(ctx context.Context, t *testing.T, extra map[string]string) (*env, *v1alpha1.SpiffeRegistration) {
	t.Helper()
	web := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", web)
	d.UID = "uid-web"
	d.Labels["tier"] = "x"
	maps.Copy(d.Labels, extra)
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, runningPod("a", "web-1", "web", "", web))
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}/tier/{label:tier}"
	})
	fb.Name, fb.Generation = "fallback", 1
	if err := e.c.Create(ctx, fb.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's entry for web", got)
	}
	return e, fb
}

func checkWebKeepsFallback(ctx context.Context, t *testing.T, e *env, main, fb *v1alpha1.SpiffeRegistration, what string) {
	t.Helper()
	rollWeb(ctx, t, e)
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Errorf("%s: Deployment a/web lost the fallback's last good entry for good, though policy main cannot render it and holds nothing for it: "+
			"SPIRE holds %v (fallback failures %+v)", what, got, fb.Status.Failures)
	}
}

// TestANewPolicyTakesNotTheFallbacksLastGoodEntry: the fallback keeps a
// last good entry for web (its own render of web fails). A new policy main
// that selects web but cannot render it is created; the fallback's pass
// runs before main's first: web is claimUnsure, keepsOwn renders web
// afresh (p.render), fails, and says the fallback keeps nothing, so web is
// yielded and its memo (the last good entry) dropped at end(). When main's
// pass wakes the fallback, web has no last good entry left.
func TestANewPolicyTakesNotTheFallbacksLastGoodEntry(t *testing.T) {
	ctx := context.Background()
	e, fb := tierFallbackEnv(ctx, t)
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	_ = e.h.CreateOrUpdate(ctx, fb)
	checkWebKeepsFallback(ctx, t, e, main, fb, "a new policy")
}

// TestARestartTakesNotTheFallbacksLastGoodEntry: as above, but main
// already judged web (claimNone, the fallback kept its last good entry);
// after a restart, the fallback's pass before main's first yields web
// (claimUnsure, keepsOwn's fresh render fails) and loses the entry for
// good: a restart changes what SPIRE holds.
func TestARestartTakesNotTheFallbacksLastGoodEntry(t *testing.T) {
	ctx := context.Background()
	e, fb := tierFallbackEnv(ctx, t)
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's last good entry for web", got)
	}
	storeStatuses(ctx, t, e, main, fb)
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, fb)
	checkWebKeepsFallback(ctx, t, e, main, fb, "after a restart")
}

// TestAWorkloadThatMovesIntoAPolicyKeepsTheFallbacksLastGoodEntry:
// main (judged: its pass ran) selects workloads labelled sel=main and
// cannot render web. web's writer adds sel=main; the fallback's pass runs
// before main's: web is claimPresumed and yielded without asking keepsOwn,
// so the fallback's memo drops web's last good entry. main's pass wakes the
// fallback, which has nothing left to register for web.
func TestAWorkloadThatMovesIntoAPolicyKeepsTheFallbacksLastGoodEntry(t *testing.T) {
	ctx := context.Background()
	e, fb := tierFallbackEnv(ctx, t)
	main := storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = teamTemplate
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"sel": "main"}}
	})
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); !slices.Equal(got, []string{tierFallbackWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's last good entry for web", got)
	}
	cur := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Labels["sel"] = "main"
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, fb)
	checkWebKeepsFallback(ctx, t, e, main, fb, "a workload moved into main")
}

// TestMainFirstKeepsTheFallbacksLastGoodEntry is the control (passes):
// the same new policy main, with main's first pass before the fallback's,
// leaves web the fallback's last good entry.
func TestMainFirstKeepsTheFallbacksLastGoodEntry(t *testing.T) {
	ctx := context.Background()
	e, fb := tierFallbackEnv(ctx, t)
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	_ = e.h.CreateOrUpdate(ctx, main)
	_ = e.h.CreateOrUpdate(ctx, fb)
	checkWebKeepsFallback(ctx, t, e, main, fb, "control")
}
