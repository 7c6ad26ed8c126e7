package spifferegistration

import (
	"context"
	"slices"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestTheOwnRecordWithATemplatedPodLabelSelectorSurvivesARestart: the
// policy also demands, by a selector template, that the pods carry the team
// label its SPIFFE ID names (k8s:pod-label:team:{label:team}). web renders
// /a/web/pay with selectors ns, sa, pod-label:app:web (matchLabels) and
// pod-label:team:pay (template). The tenant removes the team label: web's
// render fails and it keeps /a/web/pay, recorded by the operator itself.
// After a restart SPIRE held that entry under the policy's own ID, and the
// record was held to the check of an entry of a template changed since,
// which counted every pod-label selector (the template's too) against the
// workload's matchLabels: 2 != 1, and the operator's own record was
// dropped, though the policy could render it for web. A record the policy
// could render is now kept first.
func TestTheOwnRecordWithATemplatedPodLabelSelectorSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.WorkloadSelectorTemplates = []string{"k8s:pod-label:team:{label:team}"}
	})
	if !slices.Contains(p.Status.KeptEntries[0].Selectors, "k8s:pod-label:team:pay") {
		t.Fatalf("setup: record %+v", p.Status.KeptEntries[0])
	}
	restartAndRollOut(ctx, t, e, p)
	if got := paths(e.api); !slices.Equal(got, []string{"/a/web/pay"}) {
		t.Errorf("after a restart and a rollout SPIRE holds %v, want web's last good entry /a/web/pay (status keptEntries %+v, conditions %+v)",
			got, p.Status.KeptEntries, p.Status.Conditions)
	}
}

// TestTheOwnRecordOfAnAccountWidePolicyWithAPodLabelSelectorTemplate:
// the same with an account-wide SPIFFE ID: the entry selects no matchLabels,
// but the selector template's pod-label:team:pay is compared with web's
// matchLabels app=web all the same (the account-wide record was dropped).
func TestTheOwnRecordOfAnAccountWidePolicyWithAPodLabelSelectorTemplate(t *testing.T) {
	ctx := context.Background()
	web := deploy("a", "web", "web", map[string]string{"app": "web"})
	web.UID = "uid-web"
	web.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web,
		runningPod("a", "web-1", "web", "", map[string]string{"app": "web", "team": "pay"}))
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}"
		s.WorkloadSelectorTemplates = []string{"k8s:pod-label:team:{label:team}"}
	})
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(paths(e.api), []string{"/ns/a/sa/web"}) {
		t.Fatalf("setup: %v, entries %v", err, paths(e.api))
	}
	delete(web.Labels, "team")
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err == nil || len(p.Status.KeptEntries) != 1 {
		t.Fatalf("setup: web's render was to fail and be recorded: %v, %+v", err, p.Status.KeptEntries)
	}
	restartAndRollOut(ctx, t, e, p)
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/web"}) {
		t.Errorf("after a restart and a rollout SPIRE holds %v, want web's last good entry /ns/a/sa/web (status keptEntries %+v)",
			got, p.Status.KeptEntries)
	}
}
