package spifferegistration

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// hookedCreate is SPIRE that runs a hook before the next create.
type hookedCreate struct {
	*spirefake.EntryAPI
	mu   sync.Mutex
	hook func()
}

func (h *hookedCreate) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	h.mu.Lock()
	f := h.hook
	h.hook = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return h.EntryAPI.Create(ctx, in)
}

// TestAParentRenderedWhileAnotherPolicyPrunesIsRemembered: two policies
// with per-node parents, p1 for namespace a, p2 for namespace b. n1's
// parent is empty in SPIRE (p1's pod there went). p2's pod starts on n1:
// p2 renders n1's parent and creates its entry there; while that create
// is in flight, p1 passes and prunes the parents under which SPIRE holds
// nothing. Once p2's entry lands, SPIRE holds an entry under the parent,
// so the handler must still know the node it was rendered for: after n1
// is re-created under a new UID, the old entry goes once n1's pod is
// served, and is not kept for a bare pod on another node (n3), which n1's
// agent cannot serve, once n1's pod has ended.
func TestAParentRenderedWhileAnotherPolicyPrunesIsRemembered(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"t": "a"}), ns("b", map[string]string{"t": "b"}), node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		deploy("b", "api", "api", map[string]string{"app": "api"}))
	api := &hookedCreate{EntryAPI: e.api}
	p1, p2 := twoTeamsAfterN1Emptied(ctx, t, e, api)
	if err := e.c.Create(ctx, runningPod("b", "api-1", "api", "n1", map[string]string{"app": "api"})); err != nil {
		t.Fatal(err)
	}
	api.hook = func() {
		// p2's create is in flight; p1 passes meanwhile.
		if err := e.h.CreateOrUpdate(ctx, p1); err != nil {
			t.Errorf("p1: %v", err)
		}
	}
	if err := e.h.CreateOrUpdate(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if got := entriesWithParents(e); !slices.Equal(got, []string{"/ns/b/sa/api /spire/agent/k8s_psat/c1/uid-n1"}) {
		t.Fatalf("entries = %v", got)
	}
	if node, ok := e.h.parents.nodeOf(n1Parent); !ok || node != "n1" {
		t.Errorf("SPIRE holds p2's entry under %s, rendered for n1, yet the handler no longer knows its node (%q, %v)",
			n1Parent, node, ok)
	}
	// n1 is re-created under a new UID; a bare pod of b's account runs on
	// n3, whose Node object is gone (no entry can be rendered for it).
	recreateN1AndCheckABarePodElsewhereKeepsNothing(ctx, t, e, p2, "n3", "api-1")
}

// n1Parent is the parent ID of n1's agent under the default template.
const n1Parent = "spiffe://example.org/spire/agent/k8s_psat/c1/uid-n1"

// twoTeamsAfterN1Emptied wires e's handler to api, reading pods and nodes
// as in production, and returns two policies of per-node parents: p1 for
// namespace a (t=a), p2 for namespace b (t=b). p1 has registered web-1's
// entry under n1 and withdrawn it once web-1 went: SPIRE holds no entry
// under n1's parent.
func twoTeamsAfterN1Emptied(ctx context.Context, t *testing.T, e *env, api spire.EntryAPI) (p1, p2 *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e.h.Syncer = entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})
	e.h.Nodes, e.h.AllNodes, e.h.ClusterName = nodes.CacheGetter(e.c), nodes.CacheLister(e.c), "c1"
	policy := func(name, uid, team string) *v1alpha1.SpiffeRegistration {
		p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.ParentID = ""
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"t": team}}
		})
		p.Name, p.UID = name, k8stypes.UID(uid)
		return p
	}
	p1 = policy("p1", "11111111-0000-0000-0000-000000000001", "a")
	p2 = policy("p2", "22222222-0000-0000-0000-000000000002", "b")
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
	return p1, p2
}

// recreateN1AndCheckABarePodElsewhereKeepsNothing re-creates n1 under a new
// UID, starts a bare pod of b's account on node (whose Node object does not
// exist, so no entry can be rendered for it), ends n1Pod (b's pod on n1),
// runs p2 twice, and checks
// that p2's entry under n1's old parent is gone: n1's agent cannot serve a
// pod on another node.
func recreateN1AndCheckABarePodElsewhereKeepsNothing(ctx context.Context, t *testing.T, e *env, p2 *v1alpha1.SpiffeRegistration, node, n1Pod string) {
	t.Helper()
	if err := e.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1-b"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("b", "bare", "api", node, map[string]string{"other": "x"})); err != nil {
		t.Fatal(err)
	}
	// n1's pod ends: while it ran on n1, whose agent may still run under
	// the old ID, the old entry stayed for it.
	if err := e.c.Delete(ctx, runningPod("b", n1Pod, "api", "n1", nil)); err != nil {
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
			t.Errorf("the entry under n1's old parent stays for a pod on %s, which n1's agent cannot serve: %v",
				node, entriesWithParents(e))
		}
	}
}
