package spifferegistration

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAFallbacksWorkloadIsNotLeftWithoutAnEntryByAPolicyThatCannotRenderIt:
// a fallback policy registers Deployment a/web (pod web-1 runs). A policy
// that is no fallback then selects web too, but its template names a label
// web lacks ({label:team}): its render fails for web, so it registers
// nothing for it. The fallback yields web to it all the same and withdraws
// web's entry, which stays only for web-1. After a rollout (web-1 replaced
// by web-2) web's pods run with no entry at all, for as long as the
// render fails, while the fallback reports Ready. The continuity guarantee
// says render errors never open a window without an entry, and a workload
// whose render fails keeps its last good entry: here the render error of
// another policy takes it away. Now a fallback yields a workload only to a
// policy that renders it: an entry that serves web-2 (ns a, sa web)
// exists.
func TestAFallbacksWorkloadIsNotLeftWithoutAnEntryByAPolicyThatCannotRenderIt(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "web", web), runningPod("a", "web-1", "web", "", web))
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
	})
	fb.Name, fb.Generation = "fallback", 1
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/web"}) {
		t.Fatalf("fallback entries = %v", got)
	}

	main := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/team/{label:team}"
		s.ParentID = "spiffe://example.org/agent2"
	})
	main.Name, main.Generation, main.UID = "main", 1, k8stypes.UID("22222222-3333-4444-5555-666666666666")
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		_ = e.h.CreateOrUpdate(ctx, main) // fails for web: InvalidSpiffeIDTemplate
		if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	if f := main.Status.Failures; len(f) == 0 || f[0].Reason != ReasonInvalidSpiffeIDTemplate {
		t.Fatalf("main policy failures = %+v; want web's render failure", f)
	}
	// web-1 ran when the fallback withdrew the entry: it keeps it.
	if got := paths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/web"}) {
		t.Fatalf("web-1 still runs, yet its entry is gone: %v", got)
	}

	// A rollout: web-1 goes, web-2 comes.
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", web)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("a", "web-2", "web", "", web)); err != nil {
		t.Fatal(err)
	}
	pass()
	pass()

	serving := false
	for _, x := range e.api.All() {
		var sels []string
		for _, s := range x.Selectors {
			sels = append(sels, s.Type+":"+s.Value)
		}
		if slices.Contains(sels, "k8s:ns:a") && slices.Contains(sels, "k8s:sa:web") {
			serving = true
		}
	}
	if !serving {
		t.Errorf("after a rollout, Deployment a/web's pod web-2 has no entry: the fallback yielded web to a policy whose render fails for it "+
			"(fallback status: workloadsSelected=%d entriesRegistered=%d; SPIRE holds %v)",
			fb.Status.WorkloadsSelected, fb.Status.EntriesRegistered, paths(e.api))
	}
}

// The same for policies of pods: a fallback of pods yielded a pod to a
// policy of pods whose template names an annotation the pod lacks, which
// registers nothing for it, and the pod was left without an entry.
func TestAFallbacksPodIsNotLeftWithoutAnEntryByAPolicyThatCannotRenderIt(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), runningPod("a", "web-1", "web", "", web))
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.PodSelector = &metav1.LabelSelector{MatchLabels: web}
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
	})
	fb.Name, fb.Generation = "fallback", 1
	main := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: web}
		s.SpiffeIDTemplate = "ns/{namespace}/team/{annotation:team}"
	})
	main.Name, main.Generation, main.UID = "main", 1, k8stypes.UID("22222222-3333-4444-5555-666666666666")
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, main) // fails for web-1: no team annotation
	if f := main.Status.Failures; len(f) == 0 || f[0].Reason != ReasonInvalidSpiffeIDTemplate {
		t.Fatalf("main policy failures = %+v; want web-1's render failure", f)
	}
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/web"}) {
		t.Errorf("SPIRE holds %v: the fallback yielded web-1 to a policy that registers nothing for it", got)
	}
}
