package entrysync

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// withPods returns a Syncer whose retention reads pods.
func withPods(api *fake.EntryAPI, pods *podSet) *Syncer {
	return New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: pods.labels})
}

// podW is one running pod, w, of account a/sa with app=web.
func podW() *podSet {
	return &podSet{pods: map[string][]map[string]string{"a/sa": {{"app": "web"}}}, uids: map[string][]string{"a/sa": {"w"}}}
}

// holdsPath reports whether SPIRE holds an entry with the SPIFFE ID path.
func holdsPath(api *fake.EntryAPI, path string) bool {
	return slices.ContainsFunc(api.All(), func(e *types.Entry) bool { return e.SpiffeId.Path == path })
}

// named is saEntry with its own SPIFFE ID path.
func named(path, ns, sa string, podLabels ...string) entries.Entry {
	e := saEntry(ns, sa, podLabels...)
	e.SpiffeID = spiffeid.RequireFromString("spiffe://example.org" + path)
	e.Normalize()
	return e
}

// TestACoveredPodRelabelledLaterDoesNotKeepAWithdrawnIdentityThroughAnUnrelatedRefusal:
// web's identity is withdrawn while web's own pod (w) and a tenant's pod
// (t) run. t also carries the tenant workload's labels, so the tenant's
// entry, which exists, covers it: it never needed web's entry and is
// recorded as not needing it; w keeps web's entry (retention). The tenant
// then relabels t out of its own workload's shape (keeping app=web) and
// creates a workload whose entry SPIRE refuses (a DNS name with "--").
// Once w goes, web's entry must go: the refused entry was never meant to
// take t over, and t only lost its cover by being relabelled.
func TestACoveredPodRelabelledLaterDoesNotKeepAWithdrawnIdentityThroughAnUnrelatedRefusal(t *testing.T) {
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{}, uids: map[string][]string{}}
	s := withPods(api, pods)
	ctx := context.Background()
	o := owner("a", 0)
	web := named("/web", "a", "sa", "app", "web")
	tenant := named("/tenant", "a", "sa", "team", "t")
	refused := named("/ab--x", "a", "sa", "app", "ab--x")
	api.Reject[refused.SpiffeID.String()] = true
	set := func(uidLabels ...any) {
		pods.mu.Lock()
		defer pods.mu.Unlock()
		pods.pods["a/sa"], pods.uids["a/sa"] = nil, nil
		for i := 0; i+1 < len(uidLabels); i += 2 {
			pods.uids["a/sa"] = append(pods.uids["a/sa"], uidLabels[i].(string))
			pods.pods["a/sa"] = append(pods.pods["a/sa"], uidLabels[i+1].(map[string]string))
		}
	}
	has := func() bool {
		return slices.ContainsFunc(api.All(), func(e *types.Entry) bool { return e.SpiffeId.Path == "/web" })
	}
	set("w", map[string]string{"app": "web"}, "t", map[string]string{"app": "web", "team": "t"})
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web, tenant}), nil); err != nil {
		t.Fatal(err)
	}
	// web is withdrawn: w keeps its entry, t is covered by the tenant's.
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{tenant}), nil)
	if err != nil || out.Retained != 1 || !has() {
		t.Fatalf("withdrawal: %v, %+v", err, out)
	}
	// The tenant relabels t out of its workload and adds a workload SPIRE
	// refuses; w goes.
	set("t", map[string]string{"app": "web"})
	for i := 0; i < 3; i++ {
		out, _ = s.Sync(ctx, o, ptrs([]entries.Entry{tenant, refused}), nil)
	}
	if has() {
		t.Errorf("web is withdrawn and the pod that needed it is gone, yet a pod covered at the withdrawal and "+
			"relabelled since keeps its entry through an unrelated refusal (held back %d)", out.HeldBack)
	}
}
