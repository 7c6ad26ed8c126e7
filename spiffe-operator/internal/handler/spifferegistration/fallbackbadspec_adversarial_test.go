package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAFallbackAndAPolicyWhoseSpecNoLongerCompilesNeverGiveAWorkloadTwoIdentities:
// policy main (no fallback) registers Deployment a/web; a fallback policy
// yields web to it. main's spec is then edited into one that does not
// compile (a template naming an unknown variable): main is Blocked and, by
// design ("a bad edit must not revoke identities"), keeps web's entry in
// SPIRE. othersOf skips a policy whose spec does not compile, so the
// fallback no longer yields and registers web as well: web's pods hold
// main's kept identity and the fallback's at once (seen failing). The
// fallback now yields to what such a policy's selectors select.
func TestAFallbackAndAPolicyWhoseSpecNoLongerCompilesNeverGiveAWorkloadTwoIdentities(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "web", web), runningPod("a", "web-1", "web", "", web))
	main, fb, pass := mainAndFallback(t, e, "ns/{namespace}/sa/{serviceAccount}")
	pass()
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/web"}) {
		t.Fatalf("precondition: SPIRE holds %v, want main's entry alone", got)
	}

	// main's spec is edited into one that does not compile.
	cur := &v1alpha1.SpiffeRegistration{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: "main"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAcount}"
	cur.Generation = 2
	cur.Status = main.Status // as the Controller wrote it after main's passes
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	main.Spec.SpiffeIDTemplate, main.Generation = cur.Spec.SpiffeIDTemplate, 2
	pass()
	pass()

	got := paths(e.api)
	if !slices.Contains(got, "/ns/a/sa/web") {
		t.Fatalf("precondition: main's entry should be kept across its bad edit; SPIRE holds %v", got)
	}
	if slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, "/fallback/") }) {
		t.Errorf("Deployment a/web holds two identities: main keeps its entry across a spec that does not compile and the fallback registers web as well: "+
			"SPIRE holds %v (fallback: workloadsSelected=%d)", got, fb.Status.WorkloadsSelected)
	}
}
