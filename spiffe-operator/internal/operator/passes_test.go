package operator_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
)

// passesOf returns how many passes of the named policy of kind (and, for
// full passes, reason) the running operator counted.
func passesOf(policy, kind, reason string) func(Gomega) float64 {
	return passesWith(map[string]string{"name": policy, "kind": kind, "reason": reason})
}

// passesWith returns how many passes whose labels hold every pair of
// labels the running operator counted.
func passesWith(labels map[string]string) func(Gomega) float64 {
	return func(g Gomega) float64 {
		n, err := testenv.MetricSum(opMetrics, "trustplane_registration_passes_total", labels)
		g.Expect(err).NotTo(HaveOccurred())
		return n
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

	It("write a status that changes by counts only once per StatusMaxWait at most while workloads keep coming, and the last once they stop", func() {
		const workloads = 30
		namespace("passes-burst", map[string]string{"test": "passes-burst"})
		p := policyFor("passes-burst", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		// The first workload's pass records the policy's parent, a status
		// that is written at once; the burst's passes record nothing new.
		deployment("passes-burst", "w-first", "w-first", nil)
		Eventually(recordedParents(p)).Should(ConsistOf(parentOf("passes-burst")))

		wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		// Its first event is the policy as it is (Added), then one
		// Modified per write.
		watcher, err := wc.Watch(ctx, &v1alpha1.SpiffeRegistrationList{}, client.MatchingFields{"metadata.name": p.Name})
		Expect(err).NotTo(HaveOccurred())
		defer watcher.Stop()
		incremental := passesOf("passes-burst", spifferegistration.PassIncremental, "")
		full := passesWith(map[string]string{"name": "passes-burst", "kind": spifferegistration.PassFull})
		passesBefore, fullBefore := incremental(Default), full(Default)

		// A new workload every 50ms, each an event of the policy whose pass
		// writes its entry under the policy's one parent: the status
		// changes by its counts only.
		start := time.Now()
		tick := time.NewTicker(50 * time.Millisecond)
		for i := range workloads {
			<-tick.C
			deployment("passes-burst", fmt.Sprintf("w-%d", i), fmt.Sprintf("w-%d", i), nil)
		}
		tick.Stop()
		Eventually(paths(parentOf("passes-burst"))).Should(HaveLen(workloads + 1))
		elapsed := time.Since(start)
		Eventually(func(g Gomega) int32 {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return p.Status.EntriesRegistered
		}).Should(BeEquivalentTo(workloads+1), "the last status is written once the workloads stop coming")

		// The writes up to the one that left the status read above.
		writes := 0
		for ev := range watcher.ResultChan() {
			got, ok := ev.Object.(*v1alpha1.SpiffeRegistration)
			Expect(ok).To(BeTrue(), "a watch event of the policy: %v", ev.Object)
			if ev.Type == watch.Modified {
				writes++
			}
			if got.ResourceVersion == p.ResourceVersion {
				break
			}
		}
		passes, fulls := incremental(Default)-passesBefore, full(Default)-fullBefore
		Expect(passes).To(BeNumerically(">=", 2), "the workloads came in more than one pass")
		// At most one write per StatusMaxWait, the first and the last, and
		// one for each full pass that may fall in (the resync's, a retry's).
		bound := int(elapsed/controller.DefaultStatusMaxWait) + 2 + int(fulls)
		Expect(writes).To(BeNumerically("<=", bound), "%d status writes over %s for %v incremental and %v full passes",
			writes, elapsed.Round(time.Millisecond), passes, fulls)
	})
})

var _ = Describe("A policy's lastSyncTime", func() {
	It("does not go back behind SPIRE's writes while a tenant keeps editing a Deployment the policy selects", func() {
		namespace("passes-sync", map[string]string{"test": "passes-sync"})
		edited := deployment("passes-sync", "edited", "edited", nil)
		p := policyFor("passes-sync", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
		Eventually(recordedParents(p)).Should(ConsistOf(parentOf("passes-sync")))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))

		wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		watcher, err := wc.Watch(ctx, &v1alpha1.SpiffeRegistrationList{}, client.MatchingFields{"metadata.name": p.Name})
		Expect(err).NotTo(HaveOccurred())
		defer watcher.Stop()

		// The tenant's edits, every 100ms: each an event whose pass renders
		// the same entry and talks to nobody. Meanwhile a new workload's
		// pass writes its entry and lets its status wait; the edit's pass
		// after it replaces that status with its own.
		edit := func(i int) {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(edited), edited)).To(Succeed())
			edited.Labels["edit"] = fmt.Sprint(i)
			Expect(k8s.Update(ctx, edited)).To(Succeed())
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range 15 {
			<-tick.C
			edit(i)
		}
		created := time.Now()
		deployment("passes-sync", "fresh", "fresh", nil)
		for i := 15; i < 45; i++ {
			<-tick.C
			edit(i)
		}
		Eventually(paths(parentOf("passes-sync"))).Should(ConsistOf("/ns/passes-sync/sa/edited", "/ns/passes-sync/sa/fresh"))
		Eventually(func(g Gomega) int32 {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return p.Status.EntriesRegistered
		}).Should(BeEquivalentTo(2))

		// Every status written that counts the new workload's entry says
		// SPIRE was last talked to no earlier than its creation (the field
		// has a resolution of one second).
		counted := 0
		for ev := range watcher.ResultChan() {
			got, ok := ev.Object.(*v1alpha1.SpiffeRegistration)
			Expect(ok).To(BeTrue(), "a watch event of the policy: %v", ev.Object)
			if got.Status.EntriesRegistered == 2 {
				counted++
				Expect(got.Status.LastSyncTime).NotTo(BeNil())
				Expect(got.Status.LastSyncTime.Time).To(BeTemporally(">=", created.Truncate(time.Second)),
					"status %d counting the new entry (resourceVersion %s)", counted, got.ResourceVersion)
			}
			if got.ResourceVersion == p.ResourceVersion {
				break
			}
		}
		Expect(counted).To(BeNumerically(">=", 1))
	})
})
