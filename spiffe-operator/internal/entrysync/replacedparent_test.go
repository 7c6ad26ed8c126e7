package entrysync

import (
	"context"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAnIdentityReplacedAfterANodeRecreationGoesUnderTheOldAgentToo: node n1
// is re-created while the tenant's pod w runs there, so /web stays under
// n1's old agent ID. The policy then replaces w's identity /web by /basic
// (same pods, no narrower selectors): /web must go under the old agent ID
// too, since an entry the policy wants matches w. Only the same identity,
// moved to the node's new parent, does not count as serving w there.
func TestAnIdentityReplacedAfterANodeRecreationGoesUnderTheOldAgentToo(t *testing.T) {
	api := fake.New()
	pods := podW()
	pods.nodes = map[string][]string{"a/sa": {"n1"}}
	s := withPods(api, pods)
	ctx := context.Background()
	o := perNodeOwner("policy")
	web := named("/web", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs(underNodes(web, "old-n1")), nil); err != nil {
		t.Fatal(err)
	}
	// n1 re-created: the entry moves to n1's new agent ID, and the one
	// under the old ID stays for w (the change's purpose).
	if _, err := s.Sync(ctx, o, ptrs(underNodes(web, "n1")), nil); err != nil {
		t.Fatal(err)
	}
	if !holdsUnder(api, "/web", "old-n1") {
		t.Fatalf("setup: want /web under n1's old agent ID while w runs, SPIRE holds %v", api.All())
	}
	// The policy now gives w the identity /basic instead of /web.
	basic := named("/basic", "a", "sa")
	out, err := s.Sync(ctx, o, ptrs(underNodes(basic, "n1")), nil)
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
