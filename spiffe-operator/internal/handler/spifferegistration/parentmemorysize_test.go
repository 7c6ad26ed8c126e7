package spifferegistration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

// TestTheRenderedParentsOfNodesAndPoliciesLongGoneAreForgotten: per-node
// parents under the default k8s_psat template (a parent per node UID). A
// node pool churns: the Node n1 is deleted and created again under a new
// UID 200 times while web runs there, a pass each time, no entry under its
// old parents is left, and then the policy itself is deleted. What the handler remembers
// of the node each parent was rendered for must not keep growing with the
// node incarnations the cluster ever had, nor outlive every policy.
func TestTheRenderedParentsOfNodesAndPoliciesLongGoneAreForgotten(t *testing.T) {
	ctx := context.Background()
	e, p := perNodeEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}))
	// Every pass comes a prune's grace after the last one.
	clock := time.Now()
	e.h.Now = func() time.Time { return clock }
	prev := node("n1")
	for i := 0; i < 200; i++ {
		clock = clock.Add(forgetGrace)
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
	}
	if got := entriesWithParents(e); len(got) != 1 {
		t.Fatalf("entries = %v, want the one under n1's current parent", got)
	}
	e.h.parents.mu.Lock()
	remembered := len(e.h.parents.node)
	e.h.parents.mu.Unlock()
	if remembered > 2 {
		t.Errorf("one node, one entry in SPIRE, yet %d rendered parents are remembered", remembered)
	}
	if err := e.h.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A prune a grace later (any other policy's pass) forgets what the
	// deletion left empty.
	clock = clock.Add(forgetGrace)
	e.h.parents.forgetEmpty(e.h.now(), e.h.Syncer.HoldsNoneUnder)
	e.h.parents.mu.Lock()
	remembered = len(e.h.parents.node)
	e.h.parents.mu.Unlock()
	if remembered != 0 {
		t.Errorf("the only policy is deleted, yet %d rendered parents are remembered", remembered)
	}
}
