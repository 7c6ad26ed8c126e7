package spifferegistration

import (
	"context"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// TestAnEditOfAPolicyWhoseEntrySPIRERefusesKeepsTheFallbacksEntry: the
// fallback registers web (no pod runs, so nothing is retained); main
// renders web but SPIRE refuses main's entry, so the fallback keeps web.
// main is edited (a new generation): its new memo had no refused keys, so
// its pass published web as not failing before its sync and woke the
// fallback, whose pass (run as the wake asks) yielded web and deleted its
// only entry; the sync's refusal then woke the fallback again, which
// registered it anew (seen failing). An edit of main churned every such
// entry.
func TestAnEditOfAPolicyWhoseEntrySPIRERefusesKeepsTheFallbacksEntry(t *testing.T) {
	ctx := context.Background()
	e, main, seen := refusedWebUnderMain(ctx, t)
	stored := &v1alpha1.SpiffeRegistration{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: "main"}, stored); err != nil {
		t.Fatal(err)
	}
	stored.Generation = 2
	if err := e.c.Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	main.Generation = 2
	_ = e.h.CreateOrUpdate(ctx, main)
	checkFallbackKeptWeb(t, *seen, "after an edit of main")
}

// TestARelabelOfAWorkloadWhoseEntrySPIRERefusesKeepsTheFallbacksEntry: as
// above, but without an edit of main: web's writer changes its team label
// to another value SPIRE refuses as well. main's pass published web as not
// failing before its sync (its new key was not among those refused yet),
// and the fallback woken then deleted web's only entry (seen failing): one
// label edit in a namespace churned the fallback's entry and left web
// without one between.
func TestARelabelOfAWorkloadWhoseEntrySPIRERefusesKeepsTheFallbacksEntry(t *testing.T) {
	ctx := context.Background()
	e, main, seen := refusedWebUnderMain(ctx, t, "/ns/a/team/pay2")
	setTeam(ctx, t, e, "pay2")
	_ = e.h.CreateOrUpdate(ctx, main)
	checkFallbackKeptWeb(t, *seen, "after web's relabel")
}

// refusedWebUnderMain stores Deployment a/web (team=pay, no pod), the
// fallback, which registers it, and policy main, which renders web as
// mainPay but whose entries of that ID and of the extra ones SPIRE
// refuses. It then makes every wake of the fallback run its pass at once,
// as a concurrent worker may, and returns what SPIRE held after each.
func refusedWebUnderMain(ctx context.Context, t *testing.T, alsoRefused ...string) (*env, *v1alpha1.SpiffeRegistration, *[][]string) {
	t.Helper()
	d := deploy("a", "web", "web", map[string]string{"app": "web"})
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d)
	for _, path := range append([]string{mainPay}, alsoRefused...) {
		e.api.Reject["spiffe://example.org"+path] = true
	}
	fb := storedFallback(ctx, t, e)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	twoPasses(ctx, e, main, fb)
	if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's entry for web (main failures %+v)", got, main.Status.Failures)
	}
	seen := &[][]string{}
	e.h.Notify = func(o entrysync.Owner) {
		if o.Name != "fallback" {
			return
		}
		_ = e.h.CreateOrUpdate(ctx, fb)
		*seen = append(*seen, paths(e.api))
	}
	return e, main, seen
}

// checkFallbackKeptWeb fails unless every fallback pass in seen left
// SPIRE holding the fallback's entry for web.
func checkFallbackKeptWeb(t *testing.T, seen [][]string, what string) {
	t.Helper()
	for i, got := range seen {
		if !slices.Equal(got, []string{fallbackForWeb}) {
			t.Errorf("fallback pass %d woken by main's pass %s: SPIRE holds %v, want the fallback's entry for web "+
				"(main's entry is refused; web held no identity)", i+1, what, got)
		}
	}
}
