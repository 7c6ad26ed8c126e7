package spifferegistration

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
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
// renders n1's parent, then spends longer than forgetGrace on other SPIRE
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
	e.h.Syncer = entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})
	e.h.Nodes, e.h.AllNodes, e.h.ClusterName = nodes.CacheGetter(e.c), nodes.CacheLister(e.c), "c1"
	var clockMu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.h.Now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	policy := func(name, uid, team string) *v1alpha1.SpiffeRegistration {
		p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.ParentID = ""
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"t": team}}
		})
		p.Name, p.UID = name, k8stypes.UID(uid)
		return p
	}
	p1 := policy("p1", "11111111-0000-0000-0000-000000000001", "a")
	p2 := policy("p2", "22222222-0000-0000-0000-000000000002", "b")
	const n1Parent = "spiffe://example.org/spire/agent/k8s_psat/c1/uid-n1"
	if err := e.h.CreateOrUpdate(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "shop", "n1", nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if got := entriesWithParents(e); len(got) != 0 {
		t.Fatalf("setup: entries = %v, want none", got)
	}
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
	if err := e.c.Delete(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1-b"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("b", "bare", "api", "n9", map[string]string{"other": "x"})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := e.h.CreateOrUpdate(ctx, p2); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("after re-creation: %v", entriesWithParents(e))
	for _, got := range entriesWithParents(e) {
		if got == "/ns/b/sa/api /spire/agent/k8s_psat/c1/uid-n1" {
			t.Errorf("the entry under n1's old parent stays for a pod on n9, which n1's agent cannot serve: %v",
				entriesWithParents(e))
		}
	}
}
