package spifferegistration

import (
	"context"
	"slices"
	"testing"
)

// A forged status record gives web (render failing) the genuine SPIRE entry
// of another workload of the same namespace and service account (api).
// SPIRE holding it proves the operator registered it for the policy, not
// that it was web's. On the first version of that check the pod-label
// selectors were not held to web's, and after api was deleted its identity
// stayed registered, kept by web (and witnessed again at every restart).
func TestAKeptRecordTakesNoOtherWorkloadsEntry(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, nil)
	api := deploy("a", "api", "web", map[string]string{"app": "api"})
	api.UID = "uid-api"
	api.Labels["team"] = "pay"
	if err := e.c.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	var sels []string
	for _, se := range e.api.All() {
		if se.SpiffeId.Path == "/a/api/pay" {
			for _, s := range se.Selectors {
				sels = append(sels, s.Type+":"+s.Value)
			}
		}
	}
	if sels == nil {
		t.Fatalf("setup: api not registered: %v", paths(e.api))
	}
	// Forge web's record as api's entry (status write only).
	rec := &p.Status.KeptEntries[0]
	rec.SpiffeID, rec.Selectors = "spiffe://example.org/a/api/pay", sels
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	if err := e.c.Delete(ctx, api); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := paths(e.api); slices.Contains(got, "/a/api/pay") {
		t.Errorf("api is gone, yet SPIRE holds %v: web keeps api's identity from a forged record (status %+v)", got, p.Status.KeptEntries)
	}
}
