package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// perNodeOwner is an owner whose entries hang under the agent of each
// node, spiffe://example.org/agent/<node>; nodes whose name starts with
// "gone" it does not know of, and a parent "old-<node>" it knows as the
// agent of <node> before that node was re-created under a new UID.
func perNodeOwner(name string) Owner {
	o := owner(name, time.Hour)
	o.NodeOfParent = func(_ context.Context, parent string) (string, bool, bool) {
		node, ok := strings.CutPrefix(parent, "spiffe://example.org/agent/")
		if !ok || strings.HasPrefix(node, "gone") {
			return "", false, false
		}
		if was, ok := strings.CutPrefix(node, "old-"); ok {
			return was, true, false
		}
		return node, true, true
	}
	return o
}

// underNodes returns e under the agent of each node.
func underNodes(e entries.Entry, nodes ...string) []entries.Entry {
	out := make([]entries.Entry, len(nodes))
	for i, n := range nodes {
		out[i] = e
		out[i].ParentID = spiffeid.RequireFromString("spiffe://example.org/agent/" + n)
		out[i].Normalize()
	}
	return out
}

// holdsUnder reports whether SPIRE holds an entry with the path under the
// agent of node.
func holdsUnder(api *fake.EntryAPI, path, node string) bool {
	for _, e := range api.All() {
		if e.SpiffeId.Path == path && e.ParentId.Path == "/agent/"+node {
			return true
		}
	}
	return false
}

// TestAWithdrawnIdentityStaysOnlyUnderTheNodeItsPodRunsOn: with per-node
// parents, web's entry exists under n1 and n2 (its pods ran on both). The
// identity is withdrawn while one pod, w, still runs, on n1. Only the
// agent of n1 can give w an SVID, so the entry under n2 serves no running
// pod and must go at once; the one under n1 stays while w runs.
func TestAWithdrawnIdentityStaysOnlyUnderTheNodeItsPodRunsOn(t *testing.T) {
	api := fake.New()
	pods := podW()
	pods.nodes = map[string][]string{"a/sa": {"n1"}}
	s := withPods(api, pods)
	ctx := context.Background()
	o := perNodeOwner("policy")
	if _, err := s.Sync(ctx, o, ptrs(underNodes(named("/web", "a", "sa", "app", "web"), "n1", "n2")), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !holdsUnder(api, "/web", "n1") {
		t.Errorf("w runs on n1, yet the entry under n1 went")
	}
	if holdsUnder(api, "/web", "n2") {
		t.Errorf("no pod matching the withdrawn identity runs on n2, yet its entry under n2 stays (retained %d): "+
			"the identity is kept for any pod its agent may serve", out.Retained)
	}

	// Under the agent of a node the owner knows of no more (re-created
	// under a new UID, its agent still under the old ID), w may be served.
	if _, err := s.Sync(ctx, o, ptrs(underNodes(named("/web2", "a", "sa", "app", "web"), "n1", "n2", "gone-3")), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(ctx, o, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !holdsUnder(api, "/web2", "n1") || !holdsUnder(api, "/web2", "gone-3") {
		t.Errorf("w runs on n1: the entries under n1 and under a parent of no node known must stay: %v", api.All())
	}
	if holdsUnder(api, "/web2", "n2") {
		t.Errorf("the entry under n2 stays with no pod on n2")
	}

}

// TestTheRecordsKeptAcrossPassesHoldNoNodeMap: NodeOfParent closes over a
// pass's map of the nodes; the claims, retention and mask records outlive
// the pass and must not keep it alive (one map of every node per policy).
func TestTheRecordsKeptAcrossPassesHoldNoNodeMap(t *testing.T) {
	api := fake.New()
	pods := podW()
	pods.nodes = map[string][]string{"a/sa": {"n1"}}
	s := withPods(api, pods)
	ctx := context.Background()
	o := perNodeOwner("policy")
	if _, err := s.Sync(ctx, o, ptrs(underNodes(named("/web", "a", "sa", "app", "web"), "n1")), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, o, nil, nil); err != nil || out.Retained != 1 {
		t.Fatalf("setup: retained %d, %v", out.Retained, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for tag, c := range s.claims.byTag {
		if c.NodeOfParent != nil {
			t.Errorf("the claims of %s keep NodeOfParent", tag)
		}
	}
	for k, cs := range s.claims.byKey {
		for _, c := range cs {
			if c.NodeOfParent != nil {
				t.Errorf("the claim of %s on %s keeps NodeOfParent", c, k)
			}
		}
	}
	for id, r := range s.retained {
		if r.owner.NodeOfParent != nil {
			t.Errorf("the retention record of %s keeps NodeOfParent", id)
		}
	}
}

// TestAnEntryUnderARecreatedNodesOldAgentStaysForThePodsThatRanThere: node
// n1 is re-created under a new UID, so its entries move to the new agent
// ID; but the agent on n1 runs under the old ID until it attests again,
// and only an entry under that ID serves the pod w running there. The old
// entry must stay while w runs. On the old code the entry under the new
// parent counted as serving w, and the old one was deleted at once: w got
// no SVID until the agent re-attested.
func TestAnEntryUnderARecreatedNodesOldAgentStaysForThePodsThatRanThere(t *testing.T) {
	api, pods, s, o, web, out := webMovedOffARecreatedNode(t)
	if !holdsUnder(api, "/web", "n1") || !holdsUnder(api, "/web", "old-n1") {
		t.Errorf("w runs on n1, whose agent may still run under its old ID: want the entry under both IDs, SPIRE holds %v (retained %d)",
			api.All(), out.Retained)
	}
	pods.uids["a/sa"], pods.pods["a/sa"] = nil, nil
	s.PodsChanged("a")
	if _, err := s.Sync(context.Background(), o, ptrs(underNodes(web, "n1")), nil); err != nil {
		t.Fatal(err)
	}
	if holdsUnder(api, "/web", "old-n1") || !holdsUnder(api, "/web", "n1") {
		t.Errorf("w is gone: want the entry under the new agent ID alone, SPIRE holds %v", api.All())
	}
}

// TestAnIdentityReplacedAfterANodeRecreationGoesUnderTheOldAgentToo: node n1
// is re-created while the tenant's pod w runs there, so /web stays under
// n1's old agent ID. The policy then replaces w's identity /web by /basic
// (same pods, no narrower selectors): /web must go under the old agent ID
// too, since an entry the policy wants matches w. Only the same identity,
// moved to the node's new parent, does not count as serving w there.
func TestAnIdentityReplacedAfterANodeRecreationGoesUnderTheOldAgentToo(t *testing.T) {
	api, _, s, o, _, _ := webMovedOffARecreatedNode(t)
	if !holdsUnder(api, "/web", "old-n1") {
		t.Fatalf("setup: want /web under n1's old agent ID while w runs, SPIRE holds %v", api.All())
	}
	// The policy now gives w the identity /basic instead of /web.
	basic := named("/basic", "a", "sa")
	out, err := s.Sync(context.Background(), o, ptrs(underNodes(basic, "n1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if holdsUnder(api, "/web", "n1") {
		t.Fatalf("/web under n1's new agent ID stays though /basic serves w there: %v", api.All())
	}
	if holdsUnder(api, "/web", "old-n1") {
		t.Errorf("the policy replaced w's identity /web by /basic, yet /web stays under n1's old agent ID for as long as w runs "+
			"(retained %d): SPIRE holds %v", out.Retained, api.All())
	}
}

// webMovedOffARecreatedNode registers web (account a/sa, app=web) for the
// pod w on n1 under n1's agent ID, then, n1 re-created under a new UID,
// under its new one ("old-n1" is the replaced parent; see perNodeOwner),
// and returns the second pass's outcome.
func webMovedOffARecreatedNode(t *testing.T) (api *fake.EntryAPI, pods *podSet, s *Syncer, o Owner, web entries.Entry, out Outcome) {
	t.Helper()
	api = fake.New()
	pods = podW()
	pods.nodes = map[string][]string{"a/sa": {"n1"}}
	s = withPods(api, pods)
	ctx := context.Background()
	o = perNodeOwner("policy")
	web = named("/web", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs(underNodes(web, "old-n1")), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, o, ptrs(underNodes(web, "n1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	return api, pods, s, o, web, out
}
