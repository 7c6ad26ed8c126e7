package operator_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
)

// passesOf returns how many passes of the named policy of kind (and, for
// full passes, reason) the running operator counted.
func passesOf(policy, kind, reason string) func(Gomega) float64 {
	return func(g Gomega) float64 {
		families, err := opMetrics.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		for _, f := range families {
			if f.GetName() != "trustplane_registration_passes_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["name"] == policy && l["kind"] == kind && l["reason"] == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
}

var _ = Describe("Passes of a policy", func() {
	It("serve an event that records no workload without rendering every workload, and keep the resync a full pass", func() {
		namespace("passes-a", map[string]string{"test": "passes"})
		deployment("passes-a", "web", "web", nil)
		deployment("passes-a", "api", "api", nil)
		p := policyFor("passes", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
		Eventually(paths(parentOf("passes"))).Should(ConsistOf("/ns/passes-a/sa/web", "/ns/passes-a/sa/api"))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))

		// An edit of the policy that changes nothing it registers is an
		// event whose handler records no workload.
		incremental := passesOf("passes", spifferegistration.PassIncremental, spifferegistration.ReasonEventsTaken)
		before := incremental(Default)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Annotations = map[string]string{"touched": "yes"}
		Expect(k8s.Update(ctx, p)).To(Succeed())
		Eventually(incremental).Should(BeNumerically(">", before), "the edit's pass renders no workload")

		// Nothing recorded and no event: the resync renders every workload.
		resyncs := passesOf("passes", spifferegistration.PassFull, spifferegistration.ReasonResync)
		before = resyncs(Default)
		Eventually(resyncs).WithTimeout(4*resync).Should(BeNumerically(">", before), "the resync is a full pass")
		Expect(paths(parentOf("passes"))()).To(ConsistOf("/ns/passes-a/sa/web", "/ns/passes-a/sa/api"))
	})

	It("repair drift within a resync interval while events that write nothing keep coming", func() {
		namespace("passes-drift", map[string]string{"test": "passes-drift"})
		d := deployment("passes-drift", "web", "web", nil)
		p := policyFor("passes-drift", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
		Eventually(paths(parentOf("passes-drift"))).Should(ConsistOf("/ns/passes-drift/sa/web"))

		// Someone deletes the entry in SPIRE by hand.
		lost := entryAt(parentOf("passes-drift"), "/ns/passes-drift/sa/web")
		_, err := spireAPI.Delete(ctx, []string{lost.Id})
		Expect(err).NotTo(HaveOccurred())
		Expect(paths(parentOf("passes-drift"))()).To(BeEmpty())

		// Meanwhile the Deployment's labels change every 300ms: each an
		// event of the policy (a pass) that renders the same entry and
		// writes nothing, and that queues the policy before its resync.
		pokes := 0
		Eventually(func(g Gomega) []string {
			pokes++
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
			d.Labels["poke"] = fmt.Sprint(pokes)
			g.Expect(k8s.Update(ctx, d)).To(Succeed())
			return paths(parentOf("passes-drift"))()
		}).WithTimeout(2*resync).WithPolling(300*time.Millisecond).Should(ConsistOf("/ns/passes-drift/sa/web"),
			"the entry deleted by hand is back within a resync interval, events or not")
	})
})
