package spifferegistration

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAWithdrawnIdentityUnderAGoneNodeIsKeptOnlyForPodsOnThatNode:
// per-node parents. The account runs web-1 on n1 and web-2 on n2. The
// Node object n1 is deleted while web-1 still runs there, so n1's parent ID
// names no node the cluster lists today; its entry stays for web-1. Then
// web-1 goes and the identity is withdrawn while web-2 runs on n2. The
// entry under n1's parent must go: it was rendered for n1, whose agent
// cannot serve web-2, and kept it would hold the withdrawn identity for any
// pod that lands on n1 for as long as web-2 runs. The entry under n2 stays
// while web-2 runs.
func TestAWithdrawnIdentityUnderAGoneNodeIsKeptOnlyForPodsOnThatNode(t *testing.T) {
	ctx := context.Background()
	web1 := runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"})
	namespace := ns("a", map[string]string{"spiffe": "on"})
	e, p := perNodeEnv(t, namespace, node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		web1, runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"}))
	const (
		underN1 = "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1"
		underN2 = "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n2"
	)
	if got, want := entriesWithParents(e), []string{underN1, underN2}; !slices.Equal(got, want) {
		t.Fatalf("first pass: entries = %v, want %v", got, want)
	}
	if err := e.c.Delete(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, want := entriesWithParents(e), []string{underN1, underN2}; !slices.Equal(got, want) {
		t.Fatalf("n1's Node object is gone while web-1 runs there: entries = %v, want %v", got, want)
	}
	withdrawOnceGone(ctx, t, e, p, namespace, web1)
	if got, want := entriesWithParents(e), []string{underN2}; !slices.Equal(got, want) {
		t.Errorf("the identity is withdrawn while only web-2 runs, on n2: entries = %v, want %v", got, want)
	}
}

// TestARefusedEntryUnderARecreatedNodeGoesWhenItsPodsLeaveThatNode: per-node
// parents. The account runs web-1 on n1; SPIRE starts refusing the
// account's entry, and n1 is re-created under a new UID, so the entry under
// n1's old parent stays for web-1 (its replacement is the refused one).
// Meanwhile web-3 starts on n3, whose own entry SPIRE refuses too. When
// web-1 goes, the entry under n1's old parent must go although SPIRE still
// refuses and web-3 still runs: it was rendered for n1, whose agent cannot
// serve web-3.
func TestARefusedEntryUnderARecreatedNodeGoesWhenItsPodsLeaveThatNode(t *testing.T) {
	ctx := context.Background()
	web1 := runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"})
	e, p := perNodeEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}), web1)
	const underN1 = "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1"
	e.api.Reject["spiffe://example.org/ns/a/sa/shop"] = true
	if err := e.c.Delete(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: k8stypes.UID("uid-n1b")}},
		node("n3"), runningPod("a", "web-3", "shop", "n3", map[string]string{"app": "web"}),
	} {
		if err := e.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("SPIRE refused nothing")
	}
	if got, want := entriesWithParents(e), []string{underN1}; !slices.Equal(got, want) {
		t.Fatalf("n1 re-created while web-1 runs there and its new entry refused: entries = %v, want %v", got, want)
	}
	if err := e.c.Delete(ctx, web1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := e.h.CreateOrUpdate(ctx, p); err == nil {
			t.Fatalf("pass %d: SPIRE refused nothing", i)
		}
	}
	if got := entriesWithParents(e); len(got) != 0 {
		t.Errorf("web-1 left n1 while SPIRE still refuses and web-3 runs on n3: entries = %v, want none", got)
	}
}
