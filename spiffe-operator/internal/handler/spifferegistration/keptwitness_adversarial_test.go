package spifferegistration

import (
	"context"
	"slices"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// A forged status record gives web (render failing) the genuine SPIRE entry
// of another workload of the same namespace and service account (api).
// SPIRE holding it proves the operator registered it for the policy, not
// that it was web's.
//   - On the first version of that check the pod-label selectors were not
//     held to web's, and after api was deleted its identity stayed
//     registered, kept by web (and witnessed again at every restart).
//   - With api selecting its pods by the same matchLabels as web (app=web;
//     Kubernetes allows overlapping Deployment selectors, and a tenant
//     chooses them) the pod-label check held, and web kept api's identity
//     after api and every pod it selected were gone. A record SPIRE holds
//     whose SPIFFE ID the policy's template renders for some workload of
//     the account must now be one it renders for this workload.
func TestAKeptRecordTakesNoOtherWorkloadsEntry(t *testing.T) {
	for name, apiLabels := range map[string]map[string]string{
		"other matchLabels": {"app": "api"},
		"same matchLabels":  {"app": "web"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e, p, _ := failingWeb(ctx, t, nil)
			api := deploy("a", "api", "web", apiLabels)
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
			if slices.ContainsFunc(p.Status.KeptEntries, func(k v1alpha1.KeptEntry) bool { return k.SpiffeID == rec.SpiffeID }) {
				t.Errorf("after a restart the status records api's identity as web's: %+v", p.Status.KeptEntries)
			}
			// api goes, and so does the pod web's selector matches (while
			// it runs, an entry that selects it stays for it, as any entry
			// a running pod needs does).
			if err := e.c.Delete(ctx, api); err != nil {
				t.Fatal(err)
			}
			if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", nil)); err != nil {
				t.Fatal(err)
			}
			_ = e.h.CreateOrUpdate(ctx, p)
			if got := paths(e.api); slices.Contains(got, "/a/api/pay") {
				t.Errorf("api and its pods are gone, yet SPIRE holds %v: web keeps api's identity from a forged record (status %+v)", got, p.Status.KeptEntries)
			}
		})
	}
}
