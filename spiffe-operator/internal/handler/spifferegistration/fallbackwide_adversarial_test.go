package spifferegistration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAKeptWideEntryIsJudgedByItsOwnSelectors: main selects only
// Deployment a/api (service account shop) with a per-account template: its
// entry selects every pod of shop, so the fallback (a per-workload
// template) leaves web, also of shop, unregistered. main is edited to a
// template naming a label api lacks: api keeps its last good entry, still
// without pod-label selectors, but otherPolicy.wide() reads the new
// template (podSelectors) and calls main narrow. The fallback then
// registers web with an entry for app=web pods, which main's kept entry
// selects as well: web's pods hold two identities for as long as api fails.
func TestAKeptWideEntryIsJudgedByItsOwnSelectors(t *testing.T) {
	ctx := context.Background()
	e, _ := shopEnv(t)
	webL := map[string]string{"app": "web"}
	main := storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}"
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}
	})
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/app/{label:app}"
	})
	fb.Name, fb.Generation = "fallback", 1
	if err := e.c.Create(ctx, fb.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	twoPasses(ctx, e, main, fb)
	if got := selectingPod(e.api.All(), "a", "shop", webL); len(got) != 1 {
		t.Fatalf("precondition: web's pods are selected by %v, want main's per-account entry alone", got)
	}

	stored := &v1alpha1.SpiffeRegistration{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: "main"}, stored); err != nil {
		t.Fatal(err)
	}
	stored.Spec.SpiffeIDTemplate = "ns/{namespace}/tier/{label:tier}"
	stored.Generation = 2
	if err := e.c.Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	main.Spec.SpiffeIDTemplate, main.Generation = stored.Spec.SpiffeIDTemplate, 2
	twoPasses(ctx, e, main, fb)
	// Replace both pods: nothing is retained for a running pod.
	apiL := map[string]string{"app": "api"}
	for _, old := range []*corev1.Pod{runningPod("a", "web-1", "shop", "", webL), runningPod("a", "api-1", "shop", "", apiL)} {
		if err := e.c.Delete(ctx, old); err != nil {
			t.Fatal(err)
		}
	}
	for _, nw := range []*corev1.Pod{runningPod("a", "web-2", "shop", "", webL), runningPod("a", "api-2", "shop", "", apiL)} {
		if err := e.c.Create(ctx, nw); err != nil {
			t.Fatal(err)
		}
	}
	twoPasses(ctx, e, main, fb)
	if got := selectingPod(e.api.All(), "a", "shop", webL); len(got) != 1 {
		t.Errorf("Deployment a/web's pods hold %d identities: %v (main failures %+v, entriesDesired %d; fallback failures %+v)",
			len(got), got, main.Status.Failures, main.Status.EntriesDesired, fb.Status.Failures)
	}
}
