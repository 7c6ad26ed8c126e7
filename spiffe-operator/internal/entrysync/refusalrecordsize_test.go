package entrysync

import (
	"context"
	"fmt"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestTheWithdrawalRecordOfPerNodeEntriesStaysInTheOrderOfEntriesTimesPods: an
// account runs one pod on each of n nodes (a DaemonSet), with per-node
// parents, so the owner holds n entries of one pod shape. A template change
// replaces all of them and SPIRE refuses the replacements, so the n old
// entries are held back, each with its record. Each record needs one line
// per pod; the entries being created that serve a pod are the same for
// every pod of the shape and need not be copied into every line of every
// record: memory must stay in the order of entries times pods.
func TestTheWithdrawalRecordOfPerNodeEntriesStaysInTheOrderOfEntriesTimesPods(t *testing.T) {
	const n = 40
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{}}
	for i := 0; i < n; i++ {
		pods.pods["a/ds"] = append(pods.pods["a/ds"], map[string]string{"app": "ds"})
	}
	s := withPods(api, pods)
	ctx := context.Background()
	o := owner("a", 0)
	perNode := func(path string) []entries.Entry {
		out := make([]entries.Entry, n)
		for i := range out {
			e := named(path, "a", "ds", "app", "ds")
			e.ParentID = spiffeid.RequireFromString(fmt.Sprintf("spiffe://example.org/agent/n%d", i))
			e.Normalize()
			out[i] = e
		}
		return out
	}
	if _, err := s.Sync(ctx, o, ptrs(perNode("/old")), nil); err != nil {
		t.Fatal(err)
	}
	api.Reject["spiffe://example.org/ab--new"] = true
	out, _ := s.Sync(ctx, o, ptrs(perNode("/ab--new")), nil)
	if out.HeldBack != n {
		t.Fatalf("held back %d, want %d", out.HeldBack, n)
	}
	s.mu.Lock()
	lines := 0
	for _, needs := range s.withdrawn {
		lines += len(needs)
	}
	s.mu.Unlock()
	if limit := n*n + n; lines > limit {
		t.Errorf("%d entries held for %d pods: the records hold %d pod lines, above %d: they grow faster than entries x pods",
			n, n, lines, limit)
	}
}
