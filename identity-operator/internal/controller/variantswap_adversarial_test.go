package controller_test

// Two Ready bindings of one namespace and service account swap
// their variants (a blue/green promotion applied in one `kubectl apply`,
// or a GitOps sync), so each one's new group is the group the other's
// output still selects. Driven like lifecycle_adversarial_test.go: the
// framework's Controller around the real handler, controller-runtime's
// fake client, both edits landing before the operator's next passes.
import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/condition"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// TestAVariantSwapKeepsNoStaleOutput: a (variant v1, pool pa) and b
// (variant v2, pool pb) are Ready. Both are edited before the operator's
// next pass: a to v2, b to v1. No pair ever conflicts in the cache (a is v2
// while b is v1), so neither pass withdrew anything: each waited
// (PeerOutputPending) for the other's old output in its new group, keeping
// its own, for good (seen failing: "a (now variant v2) still has output
// ... selecting variant v1 pods", both PeerOutputPending). A binding that
// waits for a peer's output now withdraws its own outputs of an earlier
// spec first.
//
// Guarantees at stake: 1 (an entry's selectors match only the pods its
// binding names) and the documented "to withdraw a variant, delete or
// change its IdentityBinding: its SpiffeEntry goes". Safe behaviour: within
// a bounded number of passes, no output of a selects v1 pods any more
// (a names v2), and the pair converges: a's output selects v2, b's v1,
// both Ready.
func TestAVariantSwapKeepsNoStaleOutput(t *testing.T) {
	a := attackBindingIn("team", "a", "prod", "pa")
	b := attackBindingIn("team", "b", "prod", "pb")
	b.Spec.IdentityBoundary.Variant = "v2"
	c := attackFakeClient(t, nil, a, b, attackPool("team", "pa"), attackPool("team", "pb"))
	op := attackOperator(t, c, "prod", "prod", parentID, "prod")
	ka, kb := client.ObjectKeyFromObject(a), client.ObjectKeyFromObject(b)
	attackReconcile(t, op, ka)
	attackReconcile(t, op, kb)
	boundary := func(v string) string { return selector.PrefixBoundary + v }
	if e := attackEntry(t, c, "team", "a"); e == nil || !slices.Contains(e.Spec.Selectors, boundary("v1")) {
		t.Fatalf("precondition: a has no output for v1: %v", e)
	}
	if e := attackEntry(t, c, "team", "b"); e == nil || !slices.Contains(e.Spec.Selectors, boundary("v2")) {
		t.Fatalf("precondition: b has no output for v2: %v", e)
	}

	// The swap: both edits land before the operator's next passes.
	attackEdit(t, c, ka, func(x *v1alpha1.IdentityBinding) { x.Spec.IdentityBoundary.Variant = "v2" })
	attackEdit(t, c, kb, func(x *v1alpha1.IdentityBinding) { x.Spec.IdentityBoundary.Variant = "v1" })

	for range 10 {
		attackReconcile(t, op, ka)
		attackReconcile(t, op, kb)
	}

	ea, eb := attackEntry(t, c, "team", "a"), attackEntry(t, c, "team", "b")
	if ea != nil && slices.Contains(ea.Spec.Selectors, boundary("v1")) {
		t.Errorf("after 10 passes each, a (now variant v2) still has output %s selecting variant v1 pods with SPIFFE ID %s; a reports %s, b (now v1) reports %s",
			ea.Name, ea.Spec.SpiffeID, readyOf(t, c, ka), readyOf(t, c, kb))
	}
	if eb != nil && slices.Contains(eb.Spec.Selectors, boundary("v2")) {
		t.Errorf("after 10 passes each, b (now variant v1) still has output %s selecting variant v2 pods with SPIFFE ID %s", eb.Name, eb.Spec.SpiffeID)
	}
	if ea == nil || !slices.Contains(ea.Spec.Selectors, boundary("v2")) || eb == nil || !slices.Contains(eb.Spec.Selectors, boundary("v1")) ||
		!condition.IsReady(attackGet(t, c, ka)) || !condition.IsReady(attackGet(t, c, kb)) {
		t.Errorf("the swap never converged: a Ready=%s, b Ready=%s", readyOf(t, c, ka), readyOf(t, c, kb))
	}
}

// readyOf returns the Ready condition of a binding as "status/reason".
func readyOf(t *testing.T, c client.Client, key client.ObjectKey) string {
	t.Helper()
	r := condition.Find(attackGet(t, c, key), condition.TypeReady)
	if r == nil {
		return "<none>"
	}
	return string(r.Status) + "/" + r.Reason
}

// The same swap on the real API server and the running operator. A foreign
// SpiffeEntry carrying the group label of a third variant v3 (an object the
// operator never touches, like any foreign output) holds a back while it
// moves v1 -> v3: a then waits for it (PeerOutputPending), and its v1
// output, which selects pods a no longer names, goes at once (before, it
// stayed while a waited, and b, moved to v1, waited on it as a waited on
// b's v2 output once a moved on to v2: neither ever wrote). Then b goes
// v2 -> v1 and a v3 -> v2, and the foreign entry goes; the pair converges
// (a Ready with a v2 entry, b Ready with a v1 entry).
var _ = Describe("A variant swap between two bindings", func() {
	It("never keeps a binding's output for a variant it no longer names, and converges", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "pa", webSelector("pa"), map[string]string{"app": "pa"})
		createDeployment(ctx, ns, "pb", webSelector("pb"), map[string]string{"app": "pb"})
		createBinding(ctx, ns, "a", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "pa"))
		createBinding(ctx, ns, "b", "serving", "v2", withPool("", v1alpha1.DeploymentKind, "pb"))
		Eventually(readyReason(ctx, ns, "a")).Should(Equal("True"))
		Eventually(readyReason(ctx, ns, "b")).Should(Equal("True"))
		boundary := func(v string) string { return selector.PrefixBoundary + v }
		Expect(getEntry(ctx, ns, "a")(Default).Spec.Selectors).To(ContainElement(boundary("v1")))
		Expect(getEntry(ctx, ns, "b")(Default).Spec.Selectors).To(ContainElement(boundary("v2")))

		By("a foreign entry holds group v3 back")
		blocker := &spiffev1alpha1.SpiffeEntry{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-foreign-v3", Labels: map[string]string{index.LabelGroup: index.GroupKey(ns, "serving", "v3")}},
			Spec: spiffev1alpha1.SpiffeEntrySpec{
				SpiffeID:  "spiffe://" + trustDomain + "/ns/" + ns + "/sa/serving/foreign",
				ParentID:  parentID,
				Selectors: []string{"k8s:ns:" + ns, "k8s:sa:serving", boundary("v3")},
			},
		}
		Expect(k8s.Create(ctx, blocker)).To(Succeed())

		edit := func(name, variant string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				b := getBinding(ctx, ns, name)(g)
				b.Spec.IdentityBoundary.Variant = variant
				g.Expect(k8s.Update(ctx, b)).To(Succeed())
			}).Should(Succeed())
		}
		edit("a", "v3")
		Eventually(readyReason(ctx, ns, "a")).Should(Equal(v1alpha1.ReasonPeerOutputPending))
		Eventually(entryExists(ctx, ns, "a")).Should(BeFalse(), "a waits for group v3, yet keeps its output for v1, which it no longer names")
		edit("b", "v1")
		edit("a", "v2")
		Expect(k8s.Delete(ctx, blocker)).To(Succeed())

		By("the pair converges")
		Eventually(readyReason(ctx, ns, "a")).Should(Equal("True"))
		Eventually(readyReason(ctx, ns, "b")).Should(Equal("True"))
		Eventually(func(g Gomega) []string { return getEntry(ctx, ns, "a")(g).Spec.Selectors }).Should(ContainElement(boundary("v2")))
		Eventually(func(g Gomega) []string { return getEntry(ctx, ns, "b")(g).Spec.Selectors }).Should(ContainElement(boundary("v1")))
	}, SpecTimeout(2*time.Minute))
})
