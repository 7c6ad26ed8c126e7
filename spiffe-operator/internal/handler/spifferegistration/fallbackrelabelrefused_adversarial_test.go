package spifferegistration

import (
	"context"
	"slices"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// TestARelabelOfAWorkloadWhoseEntrySPIRERefusesKeepsTheFallbacksEntry:
// as above, but without an edit of main: web's writer changes its team
// label to another value SPIRE refuses as well. main's pass publishes web
// as not failing before its sync (its new key is not among those refused
// yet), the fallback woken then deletes web's only entry, and the refusal
// wakes it to register it anew: one label edit in a namespace churns the
// fallback's entry and leaves web without one between.
func TestARelabelOfAWorkloadWhoseEntrySPIRERefusesKeepsTheFallbacksEntry(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", webL)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d)
	e.api.Reject["spiffe://example.org"+mainPay] = true
	e.api.Reject["spiffe://example.org/ns/a/team/pay2"] = true
	fb := storedFallback(ctx, t, e)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's entry for web (main failures %+v)", got, main.Status.Failures)
	}
	var seen [][]string
	e.h.Notify = func(o entrysync.Owner) {
		if o.Name != "fallback" {
			return
		}
		_ = e.h.CreateOrUpdate(ctx, fb)
		seen = append(seen, paths(e.api))
	}
	setTeam(ctx, t, e, "pay2")
	_ = e.h.CreateOrUpdate(ctx, main)
	for i, got := range seen {
		if !slices.Equal(got, []string{fallbackForWeb}) {
			t.Errorf("fallback pass %d woken by main's pass after web's relabel: SPIRE holds %v, want the fallback's entry for web "+
				"(main's entry is refused; web held no identity)", i+1, got)
		}
	}
	t.Logf("fallback passes woken: %d, SPIRE after: %v, main failures %+v", len(seen), paths(e.api), main.Status.Failures)
}
