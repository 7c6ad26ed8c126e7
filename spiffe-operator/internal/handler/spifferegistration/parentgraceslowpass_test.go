package spifferegistration

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// hookedList is SPIRE that runs a hook before every list.
type hookedList struct {
	*spirefake.EntryAPI
	mu   sync.Mutex
	hook func(parent string)
}

func (h *hookedList) ListByParent(ctx context.Context, parent spiffeid.ID) ([]*types.Entry, error) {
	h.mu.Lock()
	f := h.hook
	h.mu.Unlock()
	if f != nil {
		f(parent.String())
	}
	return h.EntryAPI.ListByParent(ctx, parent)
}

// TestAParentRenderedBeforeASlowPassOfSeveralCallsIsRemembered: as in
// TestAParentRenderedWhileAnotherPolicyPrunesIsRemembered, but p2's pass
// renders n1's parent, then spends minutes on other SPIRE
// calls, each well under the RPC timeout (here: reading the entries under
// the parents of n2..n7, which nobody read before, 25s each; list pages and
// create batches of 50 add up the same way) before its create under n1's
// parent lands. Meanwhile p1 passes (and prunes) after each of them.
func TestAParentRenderedBeforeASlowPassOfSeveralCallsIsRemembered(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"t": "a"}), ns("b", map[string]string{"t": "b"}), node("n1"), node("n2"),
		node("n3"), node("n4"), node("n5"), node("n6"), node("n7"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		deploy("b", "api", "api", map[string]string{"app": "api"}))
	api := &hookedList{EntryAPI: e.api}
	var clockMu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.h.Now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	p1, p2 := twoTeamsAfterN1Emptied(ctx, t, e, api)
	want := []string{}
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7"} {
		if err := e.c.Create(ctx, runningPod("b", "api-"+n, "api", n, map[string]string{"app": "api"})); err != nil {
			t.Fatal(err)
		}
		want = append(want, "/ns/b/sa/api /spire/agent/k8s_psat/c1/uid-"+n)
	}
	lists := 0
	api.hook = func(parent string) {
		if parent == n1Parent {
			return
		}
		// One read of p2's pass; p1 passes meanwhile.
		lists++
		advance(25 * time.Second)
		if err := e.h.CreateOrUpdate(ctx, p1); err != nil {
			t.Errorf("p1: %v", err)
		}
	}
	if err := e.h.CreateOrUpdate(ctx, p2); err != nil {
		t.Fatal(err)
	}
	api.hook = nil
	t.Logf("p2's pass read %d parents before its create", lists)
	if got := entriesWithParents(e); !slices.Equal(got, want) {
		t.Fatalf("entries = %v, want %v", got, want)
	}
	if node, ok := e.h.parents.nodeOf(n1Parent); !ok || node != "n1" {
		t.Errorf("SPIRE holds p2's entry under %s, rendered for n1, yet the handler no longer knows its node (%q, %v)",
			n1Parent, node, ok)
	}
	// n1 is re-created under a new UID; a bare pod of b's account runs on
	// n9, whose Node object is gone.
	for _, n := range []string{"n2", "n3", "n4", "n5", "n6", "n7"} {
		if err := e.c.Delete(ctx, runningPod("b", "api-"+n, "api", n, nil)); err != nil {
			t.Fatal(err)
		}
	}
	recreateN1AndCheckABarePodElsewhereKeepsNothing(ctx, t, e, p2, "n9", "api-n1")
}
