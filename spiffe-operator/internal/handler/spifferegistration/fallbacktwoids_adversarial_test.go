package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAFallbackAndAKeptEntryNeverGiveAWorkloadTwoIdentities: policy main
// (no fallback) registers Deployment a/web as ns/a/team/pay from its team
// label; a fallback policy yields web to it. Whoever writes web drops the
// team label: main's render fails, and main keeps web's last good entry
// (render errors never take an identity away), so main still registers
// web. A fallback that yielded only to a policy rendering web (tried, and
// taken back) registered web too: web's pods held two identities at once,
// the fallback's among them, which its writer could not get while main
// took its namespace. The fallback yields to every valid policy that
// selects the workload, so this stays one identity.
func TestAFallbackAndAKeptEntryNeverGiveAWorkloadTwoIdentities(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", web)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, runningPod("a", "web-1", "web", "", web))
	main, fb, pass := mainAndFallback(t, e, "ns/{namespace}/team/{label:team}")
	pass()
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/team/pay"}) {
		t.Fatalf("precondition: SPIRE holds %v, want main's entry alone", got)
	}

	// web's writer drops the label main's template names.
	cur := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, cur); err != nil {
		t.Fatal(err)
	}
	delete(cur.Labels, "team")
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	pass()
	// A rollout: web-1 goes, web-2 comes; nothing retained for web-1 is
	// left to explain an entry.
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", web)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("a", "web-2", "web", "", web)); err != nil {
		t.Fatal(err)
	}
	pass()
	pass()

	got := paths(e.api)
	if slices.Contains(got, "/ns/a/team/pay") && slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, "/fallback/") }) {
		t.Errorf("Deployment a/web holds two identities: main keeps its last good entry and the fallback registers web as well: SPIRE holds %v "+
			"(main: entriesDesired=%d failures=%+v; fallback: workloadsSelected=%d)", got, main.Status.EntriesDesired, main.Status.Failures, fb.Status.WorkloadsSelected)
	}
}

// mainAndFallback stores a policy main with the SPIFFE ID template beside a
// fallback policy of the same workloads, and returns both with pass, which
// runs main's pass (that may fail) and then the fallback's.
func mainAndFallback(t *testing.T, e *env, template string) (main, fb *v1alpha1.SpiffeRegistration, pass func()) {
	t.Helper()
	ctx := context.Background()
	main = newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = template })
	main.Name, main.Generation, main.UID = "main", 1, k8stypes.UID("22222222-3333-4444-5555-666666666666")
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	fb = newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
	})
	fb.Name, fb.Generation = "fallback", 1
	pass = func() {
		t.Helper()
		_ = e.h.CreateOrUpdate(ctx, main)
		if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
			t.Fatal(err)
		}
	}
	return main, fb, pass
}
