package spifferegistration

import (
	"context"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// TestAnEditOfAPolicyWhoseEntrySPIRERefusesKeepsTheFallbacksEntry:
// the fallback registers web (no pod runs, so nothing is retained); main
// renders web but SPIRE refuses main's entry, so the fallback keeps web.
// main is edited (a new generation): its new memo has no refused keys, so
// its pass publishes web as not failing before its sync, and wakes the
// fallback, whose pass (run as the wake asks) yields web and deletes its
// only entry; the sync's refusal then wakes the fallback again, which
// registers it anew. An edit of main churns every such entry.
func TestAnEditOfAPolicyWhoseEntrySPIRERefusesKeepsTheFallbacksEntry(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", webL)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d)
	e.api.Reject["spiffe://example.org"+mainPay] = true
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
	// An edit of main that changes nothing it renders (a new generation).
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
	for i, got := range seen {
		if !slices.Equal(got, []string{fallbackForWeb}) {
			t.Errorf("fallback pass %d woken by main's pass after an edit of main: SPIRE holds %v, want the fallback's entry for web "+
				"(main's entry is refused; web held no identity)", i+1, got)
		}
	}
	t.Logf("fallback passes woken: %d, SPIRE after: %v", len(seen), paths(e.api))
}
