package spifferegistration

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAFallbackKeepsAWorkloadItsOwnUnjudgedRecordHoldsAfterARestart: after a restart, the fallback's status
// records web's last good entry (SPIRE holds it as the fallback's), but
// web's matchLabels changed so the record fails couldHaveKept. Another
// policy (main, not judged yet) selects web and cannot render it
// (claimUnsure). keeps() takes the record as recorded, SPIRE holds it, so
// the fallback keeps web and reports its render failure. A refactor that
// had lastWanted judge the record first made the fallback yield web
// instead (seen failing on it).
func TestAFallbackKeepsAWorkloadItsOwnUnjudgedRecordHoldsAfterARestart(t *testing.T) {
	ctx := context.Background()
	web := deploy("a", "web", "shop", map[string]string{"app": "web"})
	web.UID = "uid-web"
	web.Labels["team"] = "pay"
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), web)
	main := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/squad/{label:squad}"
	})
	main.Name, main.Generation, main.UID = "main", 1, "uid-policy-main"
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = teamTemplate
	})
	fb.Name, fb.Generation, fb.UID = "fallback", 1, "uid-policy-fallback"
	for _, p := range []*v1alpha1.SpiffeRegistration{main, fb} {
		if err := e.c.Create(ctx, p.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	pass := func() {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	pass()
	pass()
	setTeamOf(ctx, t, e, "web", "")
	pass()
	pass()
	if len(fb.Status.KeptEntries) != 1 {
		t.Fatalf("precondition: fallback keptEntries %+v, SPIRE %v", fb.Status.KeptEntries, paths(e.api))
	}
	storeStatuses(ctx, t, e, main, fb)
	cur := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Selector.MatchLabels = map[string]string{"app": "web2"}
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, fb) // first pass after the start, before main's
	t.Logf("fallback: selected=%d failures=%+v SPIRE=%v", fb.Status.WorkloadsSelected, fb.Status.Failures, paths(e.api))
	if fb.Status.WorkloadsSelected != 1 || len(fb.Status.Failures) == 0 {
		t.Errorf("the fallback yielded web (selected %d, failures %+v); before 6ff34d6 it kept web and reported its failure",
			fb.Status.WorkloadsSelected, fb.Status.Failures)
	}
}
