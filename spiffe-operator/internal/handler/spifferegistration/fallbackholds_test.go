package spifferegistration

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

const (
	mainPay        = "/ns/a/team/pay"
	fallbackForWeb = "/fallback/ns/a/sa/web"
)

// teamTemplate names the workload's team label: a workload without it
// fails to render.
const teamTemplate = "ns/{namespace}/team/{label:team}"

// TestAPolicyThatNeverRenderedAWorkloadLeavesItTheFallbacksIdentity: the
// fallback registers Deployment a/web. A policy main is created that
// selects web but whose template names a label web lacks: main's render of
// web fails and it has no last good entry, so it registers nothing for
// web. The fallback yielded web to main all the same (seen failing): a new
// policy with a template error took the only identity of every workload it
// selects and cannot render. The fallback yields to a policy only for the
// workloads that policy holds an entry for: one it renders, or one it
// keeps a last good entry for. Both orders of the first passes are run:
// before main's first pass the fallback yields web to it (it cannot know
// yet what main holds), and web's running pod keeps the entry until then,
// so web's entry never leaves SPIRE.
func TestAPolicyThatNeverRenderedAWorkloadLeavesItTheFallbacksIdentity(t *testing.T) {
	bothOrders(t, func(t *testing.T, fallbackFirst bool) {
		ctx := context.Background()
		web := map[string]string{"app": "web"}
		e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "web", web),
			runningPod("a", "web-1", "web", "", web))
		fb := storedFallback(ctx, t, e)
		if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
			t.Fatal(err)
		}
		if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
			t.Fatalf("precondition: SPIRE holds %v, want the fallback's entry for web", got)
		}

		main := storedPolicy(ctx, t, e, "main", teamTemplate)
		if fallbackFirst {
			if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
				t.Fatal(err)
			}
			if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
				t.Errorf("before main's first pass the fallback withdrew web's entry for a policy that cannot render web: SPIRE holds %v", got)
			}
		}
		_ = e.h.CreateOrUpdate(ctx, main)
		if !failureNames(main, "Deployment a/web") {
			t.Fatalf("precondition: main's render of web should fail, failures %+v", main.Status.Failures)
		}
		if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
			t.Fatal(err)
		}
		// A rollout: nothing retained for web-1 is left to explain an
		// entry.
		rollWeb(ctx, t, e)
		for _, p := range []*v1alpha1.SpiffeRegistration{main, fb} {
			_ = e.h.CreateOrUpdate(ctx, p)
		}
		if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
			t.Fatal(err)
		}
		if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
			t.Errorf("Deployment a/web lost its only identity to policy main, which selects it but cannot render it and holds nothing for it: SPIRE holds %v", got)
		}
	})
}

// TestAWorkloadThatStartsRenderingMovesFromTheFallback: web holds the
// fallback's identity beside a policy main that cannot render it. Its
// writer adds the label main's template names: main registers web, and the
// fallback yields it, whichever pass runs first; once web's pods are
// replaced, only main's identity is left.
func TestAWorkloadThatStartsRenderingMovesFromTheFallback(t *testing.T) {
	bothOrders(t, func(t *testing.T, fallbackFirst bool) {
		ctx := context.Background()
		web := map[string]string{"app": "web"}
		e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "web", web),
			runningPod("a", "web-1", "web", "", web))
		main, fb, pass := mainAndFallback(t, e, teamTemplate)
		pass()
		if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
			t.Fatalf("precondition: SPIRE holds %v, want the fallback's entry for web alone", got)
		}

		setTeam(ctx, t, e, "pay")
		if fallbackFirst {
			if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
				t.Fatal(err)
			}
		}
		pass()
		rollWeb(ctx, t, e)
		pass()
		pass()
		if got := paths(e.api); !slices.Equal(got, []string{mainPay}) {
			t.Errorf("SPIRE holds %v, want main's entry alone once web renders under main (main: failures %+v)", got, main.Status.Failures)
		}
	})
}

// TestAFallbackJudgesAfterARestartAsBefore: what SPIRE holds does not
// change when the operator restarts and the fallback's pass comes before
// the other policy's first. A workload the other policy keeps a last good
// entry for (recorded in its status) is not registered by the fallback;
// one it never rendered keeps the fallback's entry: yielded until main's
// first pass judges it, and kept meanwhile for its running pod.
func TestAFallbackJudgesAfterARestartAsBefore(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	api := map[string]string{"app": "api"}
	d := deploy("a", "web", "web", web)
	d.UID = "uid-web"
	d.Labels["team"] = "pay"
	apiDeploy := deploy("a", "api", "api", api)
	apiDeploy.UID = "uid-api"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, apiDeploy,
		runningPod("a", "web-1", "web", "", web), runningPod("a", "api-1", "api", "", api))
	main, fb, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	setTeam(ctx, t, e, "")
	pass()
	// The statuses as the operator writes them.
	storeStatuses(ctx, t, e, main, fb)
	want := []string{"/fallback/ns/a/sa/api", mainPay}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Fatalf("precondition: SPIRE holds %v, want %v (main keeps web's last good entry, the fallback registers api)", got, want)
	}

	e.h = restarted(e)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Errorf("after a restart, before main's first pass, SPIRE holds %v, want %v", got, want)
	}
	pass()
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Errorf("after a restart and both passes, SPIRE holds %v, want %v", got, want)
	}
}

// TestAWorkloadAPolicyCannotRenderWakesTheFallback: a Deployment created
// after a policy's last pass, which that policy cannot render, may be
// yielded by a fallback whose pass comes first (the policy has not judged
// it yet). The policy's pass then asks for a pass of every fallback policy,
// and the fallback registers it.
func TestAWorkloadAPolicyCannotRenderWakesTheFallback(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", web)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, runningPod("a", "web-1", "web", "", web))
	var woken []string
	e.h.Notify = func(o entrysync.Owner) { woken = append(woken, o.Kind+"/"+o.Name) }
	main, fb, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	woken = nil

	api := map[string]string{"app": "api"}
	if err := e.c.Create(ctx, deploy("a", "api", "api", api)); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, main)
	if !slices.Contains(woken, Kind+"/fallback") {
		t.Fatalf("main's render of a/api failed and it holds nothing for it, but its pass asked for no pass of the fallback (asked: %v)", woken)
	}
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := sortedPaths(e.api); !slices.Contains(got, "/fallback/ns/a/sa/api") {
		t.Errorf("SPIRE holds %v, want the fallback's entry for a/api", got)
	}
	woken = nil
	_ = e.h.CreateOrUpdate(ctx, main)
	if len(woken) != 0 {
		t.Errorf("a pass of main that changed nothing it holds woke %v", woken)
	}
}

// bothOrders runs test twice: with main's pass before the fallback's, and
// after it.
func bothOrders(t *testing.T, test func(t *testing.T, fallbackFirst bool)) {
	for _, fallbackFirst := range []bool{false, true} {
		name := "main's pass first"
		if fallbackFirst {
			name = "fallback's pass first"
		}
		t.Run(name, func(t *testing.T) { test(t, fallbackFirst) })
	}
}

// shopEnv holds Deployments a/web and a/api, both running as service
// account shop, each with a running pod; api has the team label. It
// returns api's pod labels.
func shopEnv(t *testing.T) (*env, map[string]string) {
	t.Helper()
	webL := map[string]string{"app": "web"}
	apiL := map[string]string{"app": "api"}
	api := deploy("a", "api", "shop", apiL)
	api.Labels["team"] = "pay"
	return retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", webL), api,
		runningPod("a", "web-1", "shop", "", webL), runningPod("a", "api-1", "shop", "", apiL)), apiL
}

// storedMain stores a policy main of the given spec.
func storedMain(ctx context.Context, t *testing.T, e *env, mut func(*v1alpha1.SpiffeRegistrationSpec)) *v1alpha1.SpiffeRegistration {
	t.Helper()
	main := newPolicy(mut)
	main.Name, main.Generation, main.UID = "main", 1, "uid-policy-main"
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	return main
}

// twoPasses runs main's pass and then the fallback's, twice; either may
// fail (what SPIRE holds is what the tests judge).
func twoPasses(ctx context.Context, e *env, main, fb *v1alpha1.SpiffeRegistration) {
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
}

// rollWeb replaces web's pod web-1 by web-2, as a rollout does.
func rollWeb(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	web := map[string]string{"app": "web"}
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", web)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("a", "web-2", "web", "", web)); err != nil {
		t.Fatal(err)
	}
}

// mainAndStoredFallback is mainAndFallback with the fallback policy
// stored too, so that policies' passes that list it find it.
func mainAndStoredFallback(t *testing.T, e *env, template string) (main, fb *v1alpha1.SpiffeRegistration, pass func()) {
	t.Helper()
	main, fb, pass = mainAndFallback(t, e, template)
	if err := e.c.Create(context.Background(), fb.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	return main, fb, pass
}

// storeStatuses writes each policy's status as a pass left it to the API
// server, as the operator does.
func storeStatuses(ctx context.Context, t *testing.T, e *env, ps ...*v1alpha1.SpiffeRegistration) {
	t.Helper()
	for _, p := range ps {
		stored := &v1alpha1.SpiffeRegistration{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: p.Name}, stored); err != nil {
			t.Fatal(err)
		}
		stored.Status = p.Status
		if err := e.c.Update(ctx, stored); err != nil { // the fake client has no status subresource
			t.Fatal(err)
		}
	}
}

// storedFallback stores the fallback policy mainAndFallback makes.
func storedFallback(ctx context.Context, t *testing.T, e *env) *v1alpha1.SpiffeRegistration {
	t.Helper()
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
	})
	fb.Name, fb.Generation = "fallback", 1
	if err := e.c.Create(ctx, fb.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	return fb
}

// storedPolicy stores a policy of the given name and SPIFFE ID template.
func storedPolicy(ctx context.Context, t *testing.T, e *env, name, template string) *v1alpha1.SpiffeRegistration {
	t.Helper()
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = template })
	p.Name, p.Generation, p.UID = name, 1, k8stypes.UID("uid-policy-"+name)
	if err := e.c.Create(ctx, p.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	return p
}

// setTeam sets Deployment a/web's team label, or removes it when team is
// empty.
func setTeam(ctx context.Context, t *testing.T, e *env, team string) {
	t.Helper()
	setTeamOf(ctx, t, e, "web", team)
}

// setTeamOf sets the team label of Deployment a/name, or removes it when
// team is empty.
func setTeamOf(ctx context.Context, t *testing.T, e *env, name, team string) {
	t.Helper()
	setLabelOf(ctx, t, e, name, "team", team)
}

// setLabelOf sets label key of Deployment a/name, or removes it when value
// is empty.
func setLabelOf(ctx context.Context, t *testing.T, e *env, name, key, value string) {
	t.Helper()
	cur := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: name}, cur); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(cur.Labels, key)
	} else {
		cur.Labels[key] = value
	}
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
}

// failureNames reports whether p's status names object among its failures.
func failureNames(p *v1alpha1.SpiffeRegistration, object string) bool {
	return slices.ContainsFunc(p.Status.Failures, func(f v1alpha1.Failure) bool { return f.Object == object })
}

// TestAFallbackLeavesAWorkloadThatSharesAnAccountWithAnotherPolicys:
// policy main selects only Deployment a/api, which runs as service account
// shop; Deployment a/web, which main does not select, runs as shop too.
// The fallback's entry for web selects every pod of shop in namespace a,
// so api's pods held main's identity and the fallback's (seen failing).
// The fallback leaves web unregistered and its status says why.
func TestAFallbackLeavesAWorkloadThatSharesAnAccountWithAnotherPolicys(t *testing.T) {
	ctx := context.Background()
	e, apiL := shopEnv(t)
	main := storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = teamTemplate
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: apiL}
	})
	fb := storedFallback(ctx, t, e)
	twoPasses(ctx, e, main, fb)
	if got := selectingPod(e.api.All(), "a", "shop", apiL); len(got) != 1 {
		t.Errorf("Deployment a/api's pods are selected by %v, want main's entry alone", got)
	}
	if !slices.ContainsFunc(fb.Status.Failures, func(f v1alpha1.Failure) bool {
		return f.Object == "Deployment a/web" && f.Reason == ReasonSharesPodsWithAnotherPolicy
	}) {
		t.Errorf("the fallback's status does not say why it leaves web unregistered: failures %+v", fb.Status.Failures)
	}
}
