package controller_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

var _ = Describe("The cost of a conflicted group", func() {
	// Every change of a group requeues all its members, and each member's
	// pass withdraws its outputs. Once a member's absence of outputs is
	// confirmed by an uncached read, its later passes trust that while no
	// pass of it writes one: a namespace that builds a large group cannot
	// make each of those passes list outputs from the API server.
	It("its members list their outputs from the API server once, not on every pass a peer causes", func(ctx context.Context) {
		ns := newNamespace(ctx)
		const members = 30
		// The pools need not exist: a conflict is judged before the pool is
		// read. Each member names its own, so each renders its own ID and
		// the conflicts are all VariantConflict.
		pool := func(name string) bindingOpt { return withPool("", v1alpha1.DeploymentKind, "web-"+name) }
		_, writesFrom := outputLists.statusWritesOf(ns, 0)
		for i := range members {
			name := fmt.Sprintf("m%02d", i)
			createBinding(ctx, ns, name, "serving", "v1", pool(name))
		}
		// settled passes once every binding of the namespace except those
		// in outside reports a conflict with peers others.
		settled := func(peers int, outside ...string) func(Gomega) {
			return func(g Gomega) {
				var list v1alpha1.IdentityBindingList
				g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
				for i := range list.Items {
					b := &list.Items[i]
					if slices.Contains(outside, b.Name) {
						continue
					}
					g.Expect(readyReasonOf(b)).To(Equal(v1alpha1.ReasonVariantConflict), "binding %s", b.Name)
					g.Expect(findMessage(b, v1alpha1.ConditionConflict)).To(ContainSubstring(fmt.Sprintf("(%d in all", peers)), "binding %s", b.Name)
				}
			}
		}
		Eventually(settled(members - 1)).WithTimeout(time.Minute).Should(Succeed())
		writes, writesFrom := outputLists.statusWritesOf(ns, writesFrom)
		GinkgoWriter.Printf("building the group of %d: %d status writes\n", members, writes)
		var list v1alpha1.IdentityBindingList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		uids := map[string]bool{}
		for _, b := range list.Items {
			uids[string(b.UID)] = true
		}
		Expect(uids).To(HaveLen(members))
		from := outputLists.mark()

		By("a member joins")
		joining := createBinding(ctx, ns, "joining", "serving", "v1", pool("joining"))
		Eventually(settled(members)).WithTimeout(time.Minute).Should(Succeed())
		writes, writesFrom = outputLists.statusWritesOf(ns, writesFrom)
		GinkgoWriter.Printf("one joining: %d status writes\n", writes)
		// Every member's Conflict message counts its peers, so each writes
		// its status once; a retried write may add one.
		Expect(writes).To(BeNumerically(">=", members+1))
		Expect(writes).To(BeNumerically("<=", 2*(members+1)), "a member wrote its status more than twice for one peer joining")

		By("it leaves the group and comes back")
		setVariant := func(v string) {
			Eventually(func(g Gomega) {
				cur := getBinding(ctx, ns, joining.Name)(g)
				cur.Spec.IdentityBoundary.Variant = v
				g.Expect(k8s.Update(ctx, cur)).To(Succeed())
			}).Should(Succeed())
		}
		setVariant("v2")
		Eventually(settled(members-1, joining.Name)).WithTimeout(time.Minute).Should(Succeed())
		setVariant("v1")
		Eventually(settled(members)).WithTimeout(time.Minute).Should(Succeed())

		Expect(outputLists.count(from, map[string]bool{string(joining.UID): true})).To(BeNumerically(">", 0),
			"the joining member confirms its own absence of outputs uncached: the recorder sees such lists")
		Expect(outputLists.count(from, uids)).To(BeZero(),
			"the members already confirmed without outputs listed them from the API server again")
	}, SpecTimeout(4*time.Minute))
})
