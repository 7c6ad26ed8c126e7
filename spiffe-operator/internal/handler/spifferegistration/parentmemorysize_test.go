package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

// TestTheRenderedParentsOfNodesLongGoneAreForgotten: per-node parents under
// the default k8s_psat template (a parent per node UID). A node pool
// churns: the Node n1 is deleted and created again under a new UID 200
// times while web runs there, a pass each time. What the handler remembers
// of the node each parent was rendered for must not grow with the node
// incarnations the cluster ever had: it keeps the most recently rendered
// parents, up to its bound (10 here), and the current one among them.
func TestTheRenderedParentsOfNodesLongGoneAreForgotten(t *testing.T) {
	ctx := context.Background()
	e, p := perNodeEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}))
	e.h.parents.max = 10
	prev := node("n1")
	for i := 0; i < 200; i++ {
		if err := e.c.Delete(ctx, prev); err != nil {
			t.Fatal(err)
		}
		prev = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: k8stypes.UID(fmt.Sprintf("uid-n1-%d", i))}}
		if err := e.c.Create(ctx, prev); err != nil {
			t.Fatal(err)
		}
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatal(err)
		}
		if n := e.h.parents.len(); n > 10 {
			t.Fatalf("after %d re-creations %d rendered parents are remembered, over the bound of 10", i+1, n)
		}
	}
	// web-1 ran on n1 through every re-creation, and n1's agent may still
	// run under any of the IDs it had: the entries under the parents still
	// remembered stay for web-1, no more than the bound, the current one
	// among them.
	got := entriesWithParents(e)
	if len(got) > 10 || !slices.Contains(got, "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1-199") {
		t.Fatalf("entries = %v, want the current parent's and at most 10 in all", got)
	}
	if node, ok := e.h.parents.nodeOf("spiffe://example.org/spire/agent/k8s_psat/c1/uid-n1-199"); !ok || node != "n1" {
		t.Errorf("the current parent is not remembered: %q, %v", node, ok)
	}
	if _, ok := e.h.parents.nodeOf("spiffe://example.org/spire/agent/k8s_psat/c1/uid-n1-0"); ok {
		t.Error("a parent rendered 200 incarnations ago is still remembered")
	}
}

// TestRenderedParentsKeepTheRecentlyRenderedAndNameNoNodeWhenAmbiguous: a
// parent rendered again counts as recent, so churn elsewhere does not
// evict it; a parent rendered for two node names names neither.
func TestRenderedParentsKeepTheRecentlyRenderedAndNameNoNodeWhenAmbiguous(t *testing.T) {
	r := renderedParents{max: 3}
	r.record("p-stable", "n1", "")
	for i := 0; i < 10; i++ {
		r.record(fmt.Sprintf("p-churn-%d", i), fmt.Sprintf("c%d", i), "")
		r.record("p-stable", "n1", "")
	}
	if node, ok := r.nodeOf("p-stable"); !ok || node != "n1" || r.len() != 3 {
		t.Errorf("p-stable: %q, %v; %d remembered, want n1 and 3", node, ok, r.len())
	}
	if _, ok := r.nodeOf("p-churn-0"); ok {
		t.Error("the oldest parent beyond the bound is still remembered")
	}
	r.record("p-stable", "n2", "")
	if node, ok := r.nodeOf("p-stable"); ok {
		t.Errorf("a parent rendered for n1 and n2 names %q", node)
	}
}
