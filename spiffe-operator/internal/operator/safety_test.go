package operator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// entryWatch records every observation of the entries under one parent,
// read from SPIRE in a loop until stopped: for each SPIFFE ID path, the
// entry IDs seen, and the observations in which a path was missing.
type entryWatch struct {
	mu      sync.Mutex
	ids     map[string][]string
	missing []string
	reads   int
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
}

// watchEntries starts recording the entries at paths under parent.
func watchEntries(parent string, paths []string) *entryWatch {
	w := &entryWatch{ids: map[string][]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	p := spiffeid.RequireFromString(parent)
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			list, err := spireAPI.ListByParent(context.Background(), p)
			if err != nil {
				continue
			}
			now := time.Now().Format("15:04:05.000")
			w.mu.Lock()
			w.reads++
			seen := map[string]bool{}
			for _, e := range list {
				seen[e.SpiffeId.Path] = true
				if !slices.Contains(w.ids[e.SpiffeId.Path], e.Id) {
					w.ids[e.SpiffeId.Path] = append(w.ids[e.SpiffeId.Path], e.Id)
				}
			}
			for _, path := range paths {
				if !seen[path] {
					w.missing = append(w.missing, now+" "+path)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// finish stops the watch and returns what it saw; it may be called again.
func (w *entryWatch) finish() (ids map[string][]string, missing []string, reads int) {
	w.stopped.Do(func() { close(w.stop) })
	<-w.done
	return w.ids, w.missing, w.reads
}

// createSA creates a service account, as a pod needs one to exist.
func createSA(ns, name string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
}

// pod creates a pod directly (no controller-manager runs here), as a
// ReplicaSet of a Deployment would.
func pod(ns, name, sa string, labels map[string]string) *corev1.Pod {
	GinkgoHelper()
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	return p
}

func deletePod(p *corev1.Pod) {
	GinkgoHelper()
	Expect(k8s.Delete(ctx, p, client.GracePeriodSeconds(0))).To(Succeed())
}

var _ = Describe("Entry ID prefixes", func() {
	It("refuses at startup a prefix that starts every cluster's default prefix", func() {
		opCtx, cancel := context.WithCancel(context.Background())
		defer cancel()
		other, err := operator.New(opCtx, cp.Config, operator.Options{
			Config:           config.Default(),
			Connect:          spireconn.Options{SocketPath: srv.SocketPath},
			TrustDomain:      trustDomain,
			EntryIDPrefix:    entries.DefaultIDPrefix,
			PageSize:         100,
			WriteConcurrency: 1,
			Manager:          manager.Options{KubeQPS: 10, KubeBurst: 20, MetricsAddr: "0", ProbeAddr: "0", Reentrant: true},
		}, prometheus.NewRegistry())
		if err == nil {
			cancel()
			Expect(other.Start(opCtx)).To(Succeed())
		}
		Expect(err).To(MatchError(ContainSubstring("starts the default prefix of every cluster")))
	})

	It("writes IDs SPIRE keeps with every character and the greatest length a prefix may have", func() {
		prefix := "Az09_-." + strings.Repeat("x", 56) + "."
		ids := entries.IDScheme{Prefix: prefix}
		Expect(ids.Validate()).To(Succeed())
		Expect(entries.IDScheme{Prefix: prefix[1:] + "y."}.Validate()).To(MatchError(ContainSubstring("longer than 64")))
		e := entries.Entry{
			SpiffeID:  spiffeid.RequireFromString("spiffe://" + trustDomain + "/prefix/chars"),
			ParentID:  spiffeid.RequireFromString(parentOf("prefixchars")),
			Selectors: []entries.Selector{{Type: "k8s", Value: "ns:prefixchars"}},
		}
		e.Normalize()
		id := ids.EntryID("0123456789ab", e.Key())
		res, err := spireAPI.Create(ctx, []*types.Entry{e.Proto(id)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res[0].Code.String()).To(Equal("OK"), res[0].Message)
		DeferCleanup(func() {
			_, err := spireAPI.Delete(ctx, []string{id})
			Expect(err).NotTo(HaveOccurred())
		})
		Expect(res[0].Entry.GetId()).To(Equal(id))
		tag, ours := ids.Owner(entryAt(parentOf("prefixchars"), "/prefix/chars").Id)
		Expect(ours).To(BeTrue())
		Expect(tag).To(Equal("0123456789ab"))
	})

	It("lets operators of two clusters share SPIRE and a parent ID, one with the default prefix and one with a prefix "+
		"nested under it, without either ever deleting the other's entries, orphan collection included", func() {
		scheme, err := operator.Scheme()
		Expect(err).NotTo(HaveOccurred())
		cp2, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{
			CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
			Scheme:            scheme,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(cp2.Stop()).To(Succeed()) })
		nested := op.EntryIDPrefix + "eu."
		other, stopOther := launch(cp2.Config, func(o *operator.Options) { o.EntryIDPrefix = nested })
		DeferCleanup(stopOther)
		Expect(other.EntryIDPrefix).To(Equal(nested))

		// The same policy name, parent ID and namespace label in both clusters.
		namespace("nest-a", map[string]string{"test": "nest"})
		deployment("nest-a", "web", "one", nil)
		Expect(k8s.Create(ctx, policyFor("nest", nil))).To(Succeed())
		k2 := cp2.Client
		Expect(k2.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nest-b", Labels: map[string]string{"test": "nest"}}})).To(Succeed())
		deploymentIn(k2, "nest-b", "web", "two", nil)
		Expect(k2.Create(ctx, policyFor("nest", nil))).To(Succeed())

		Eventually(paths(parentOf("nest"))).Should(Equal([]string{"/ns/nest-a/sa/one", "/ns/nest-b/sa/two"}))
		a := entryAt(parentOf("nest"), "/ns/nest-a/sa/one").Id
		b := entryAt(parentOf("nest"), "/ns/nest-b/sa/two").Id
		Expect(a).NotTo(HavePrefix(nested))
		Expect(b).To(HavePrefix(nested))

		// Each operator re-reads the parent at every resync and collects the
		// entries of owners it does not know: across three resyncs, neither
		// takes the other's entries for orphans of its own.
		Consistently(func() []string {
			var ids []string
			for _, e := range entriesUnder(parentOf("nest")) {
				ids = append(ids, e.Id)
			}
			sort.Strings(ids)
			return ids
		}, 3*resync+time.Second, 50*time.Millisecond).Should(ConsistOf(a, b))
	})
})

var _ = Describe("Shared entries across restarts and leader changes", func() {
	It("keeps the ID of an entry two objects render, and never lets it go absent, across a restart and a leader change", func() {
		const pairs = 4
		namespace("churn-a", map[string]string{"test": "churn"})
		var want []string
		entriesOf := make([]*v1alpha1.SpiffeEntry, pairs)
		createEntry := func(i int) {
			sa := fmt.Sprintf("w%d", i)
			e := spiffeEntry(fmt.Sprintf("churn-%d", i), func(s *v1alpha1.SpiffeEntrySpec) {
				s.SpiffeID = "spiffe://" + trustDomain + "/ns/churn-a/sa/" + sa
				s.ParentID = parentOf("churn")
				s.Selectors = []string{"k8s:ns:churn-a", "k8s:sa:" + sa}
			})
			Expect(k8s.Create(ctx, e)).To(Succeed())
			entriesOf[i] = e
		}
		for i := range pairs {
			deployment("churn-a", fmt.Sprintf("w%d", i), fmt.Sprintf("w%d", i), nil)
			want = append(want, fmt.Sprintf("/ns/churn-a/sa/w%d", i))
		}
		// Creation times have a one-second resolution: the first two
		// SpiffeEntries are older than the policy, the last two younger, so
		// whichever kind passes first after a restart meets an older holder.
		afterASecond := func(t metav1.Time) func() bool {
			return func() bool { return time.Now().After(t.Add(1100 * time.Millisecond)) }
		}
		createEntry(0)
		createEntry(1)
		Eventually(afterASecond(entriesOf[1].CreationTimestamp), 3*time.Second).Should(BeTrue())
		p := policyFor("churn", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(afterASecond(p.CreationTimestamp), 3*time.Second).Should(BeTrue())
		createEntry(2)
		createEntry(3)

		holders := func() []string {
			var out []string
			for _, path := range want {
				e := entryAt(parentOf("churn"), path)
				if e == nil {
					out = append(out, path+" missing")
					continue
				}
				out = append(out, e.Id)
			}
			return out
		}
		wantIDs := []string{
			op.EntryIDPrefix + entries.OwnerTag(entriesOf[0].UID) + ".",
			op.EntryIDPrefix + entries.OwnerTag(entriesOf[1].UID) + ".",
			op.EntryIDPrefix + entries.OwnerTag(p.UID) + ".",
			op.EntryIDPrefix + entries.OwnerTag(p.UID) + ".",
		}
		Eventually(func() []string {
			var out []string
			for i, id := range holders() {
				if len(id) < len(wantIDs[i]) || id[:len(wantIDs[i])] != wantIDs[i] {
					out = append(out, fmt.Sprintf("%s held by %s", want[i], id))
				}
			}
			return out
		}).Should(BeEmpty(), "the oldest object holds each entry")
		Eventually(func() int32 { _ = policyReady(p)(); return p.Status.EntriesRegistered + p.Status.EntriesMasked }).Should(Equal(int32(pairs)))
		before := holders()

		w := watchEntries(parentOf("churn"), want)
		DeferCleanup(func() { _, _, _ = w.finish() })

		// A restart: every object has its first pass again, in any order.
		whileOperatorDown(func() {})
		Consistently(holders, 2*resync, 20*time.Millisecond).Should(Equal(before))

		// A leader change: two replicas, the first leads, then stops; the
		// second takes the lease (after it expires) and has its first passes.
		stopOperator()
		replica := func(o *operator.Options) {
			o.Manager.LeaderElect = true
			o.Manager.LeaderElectionNamespace = "default"
		}
		first, stopFirst := launch(cp.Config, replica)
		Eventually(first.Manager.Elected(), 30*time.Second).Should(BeClosed())
		second, stopSecond := launch(cp.Config, replica)
		DeferCleanup(func() {
			stopSecond()
			startOperator()
		})
		Consistently(second.Manager.Elected(), time.Second).ShouldNot(BeClosed())
		stopFirst()
		Eventually(second.Manager.Elected(), 40*time.Second).Should(BeClosed())
		Consistently(holders, 2*resync, 20*time.Millisecond).Should(Equal(before))

		ids, missing, reads := w.finish()
		Expect(reads).To(BeNumerically(">", 100), "SPIRE was read often enough to see a gap")
		Expect(missing).To(BeEmpty(), "an entry was absent")
		for i, path := range want {
			Expect(ids[path]).To(Equal([]string{before[i]}), "the entry of %s changed its ID", path)
		}
	})
})

var _ = Describe("A hand-over SPIRE refuses", func() {
	It("leaves the younger holder's entry in place while SPIRE refuses the older object's fields, and hands over once it accepts them", func() {
		parent := parentOf("handover")
		spec := func(s *v1alpha1.SpiffeEntrySpec) {
			s.SpiffeID = "spiffe://" + trustDomain + "/vm/handover"
			s.ParentID = parent
			s.Selectors = []string{"unix:uid:2002"}
		}
		older := spiffeEntry("handover-older", func(s *v1alpha1.SpiffeEntrySpec) {
			spec(s)
			s.SpiffeID = "spiffe://" + trustDomain + "/vm/handover-first"
			s.Selectors = []string{"unix:uid:2001"}
		})
		Expect(k8s.Create(ctx, older)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, older))).To(Succeed()) })
		Eventually(entryReady(older)).Should(Equal("True/Ready"))
		// Creation times have a one-second resolution.
		Eventually(func() bool { return time.Now().After(older.CreationTimestamp.Add(1100 * time.Millisecond)) }, 3*time.Second).Should(BeTrue())
		younger := spiffeEntry("handover-younger", spec)
		Expect(k8s.Create(ctx, younger)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, younger))).To(Succeed()) })
		Eventually(entryReady(younger)).Should(Equal("True/Ready"))
		held := younger.Status.EntryID
		Expect(entryAt(parent, "/vm/handover").GetId()).To(Equal(held))

		By("the older object comes to render the same entry, federating with a trust domain SPIRE has no bundle of")
		w := watchEntries(parent, []string{"/vm/handover"})
		DeferCleanup(func() { _, _, _ = w.finish() })
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(older), older)).To(Succeed())
		spec(&older.Spec)
		older.Spec.FederatesWith = []v1alpha1.TrustDomainName{"nobundle.test"}
		Expect(k8s.Update(ctx, older)).To(Succeed())
		Eventually(entryReady(older)).Should(Equal("False/FederatedBundleMissing"))
		Consistently(func() string { return entryAt(parent, "/vm/handover").GetId() }, 2*resync, 50*time.Millisecond).Should(Equal(held),
			"the holder's entry stays while SPIRE refuses what would replace it")
		_, missing, reads := w.finish()
		Expect(reads).To(BeNumerically(">", 20), "SPIRE was read often enough to see a gap")
		Expect(missing).To(BeEmpty(), "the entry was absent")

		By("once SPIRE accepts the older object's fields, the older object holds the entry")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(older), older)).To(Succeed())
		older.Spec.FederatesWith = nil
		Expect(k8s.Update(ctx, older)).To(Succeed())
		Eventually(func() string { return entryAt(parent, "/vm/handover").GetId() }).Should(
			HavePrefix(op.EntryIDPrefix + entries.OwnerTag(older.UID) + "."))
		Eventually(entryReady(older)).Should(Equal("True/Ready"))
	})
})

var _ = Describe("Entries follow the pods that run", func() {
	It("keeps the old service account's entry while a pod of the old ReplicaSet still runs under it", func() {
		namespace("sachange-a", map[string]string{"test": "sachange"})
		createSA("sachange-a", "old")
		createSA("sachange-a", "new")
		d := deployment("sachange-a", "web", "old", nil)
		running := pod("sachange-a", "web-old-1", "old", map[string]string{"app": "web"})
		finishing := pod("sachange-a", "web-old-2", "old", map[string]string{"app": "web"})
		p := policyFor("sachange", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("sachange"))).Should(Equal([]string{"/ns/sachange-a/sa/old"}))
		oldID := entryAt(parentOf("sachange"), "/ns/sachange-a/sa/old").Id

		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Template.Spec.ServiceAccountName = "new"
		Expect(k8s.Patch(ctx, d, patch)).To(Succeed())
		Eventually(paths(parentOf("sachange"))).Should(ContainElement("/ns/sachange-a/sa/new"))
		// Across incremental passes and resyncs, the old pod keeps its entry.
		Consistently(func() string {
			if e := entryAt(parentOf("sachange"), "/ns/sachange-a/sa/old"); e != nil {
				return e.Id
			}
			return "absent"
		}, 2*resync).Should(Equal(oldID))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))

		// One old pod goes; the other still runs, so the entry stays.
		deletePod(running)
		Consistently(paths(parentOf("sachange")), resync).Should(Equal([]string{"/ns/sachange-a/sa/new", "/ns/sachange-a/sa/old"}))
		// The old ReplicaSet's last pod completes: the entry goes.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(finishing), finishing)).To(Succeed())
		finishing.Status.Phase = corev1.PodSucceeded
		Expect(k8s.Status().Update(ctx, finishing)).To(Succeed())
		Eventually(paths(parentOf("sachange")), resync/2).Should(Equal([]string{"/ns/sachange-a/sa/new"}))
	})

	It("keeps the entry of a workload whose render now fails, reports the render error, and keeps it across a restart and a rollout", func() {
		namespace("renderfail-a", map[string]string{"test": "renderfail"})
		createSA("renderfail-a", "web")
		deployment("renderfail-a", "web", "web", nil)
		running := pod("renderfail-a", "web-1", "web", map[string]string{"app": "web"})
		p := policyFor("renderfail", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("renderfail"))).Should(Equal([]string{"/ns/renderfail-a/sa/web"}))

		// The template now needs a label the workload lacks.
		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.SpiffeIDTemplate = "team/{label:team}/{serviceAccount}"
		})).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("False/InvalidSpiffeIDTemplate"))
		Expect(p.Status.Failures).To(HaveLen(1))
		Expect(p.Status.Failures[0].Object).To(Equal("Deployment renderfail-a/web"))
		Consistently(paths(parentOf("renderfail")), 2*resync).Should(Equal([]string{"/ns/renderfail-a/sa/web"}))
		// The API server keeps the record of the last good entry.
		keptSpiffeIDs := func() ([]string, error) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return nil, err
			}
			var ids []string
			for _, k := range p.Status.KeptEntries {
				ids = append(ids, k.SpiffeID)
			}
			return ids, nil
		}
		Eventually(keptSpiffeIDs).Should(Equal([]string{"spiffe://example.org/ns/renderfail-a/sa/web"}))

		// A restart forgets renders, not the record: a rollout after it
		// (the pod replaced) keeps the identity.
		whileOperatorDown(func() {})
		Eventually(policyReady(p)).Should(Equal("False/InvalidSpiffeIDTemplate"))
		deletePod(running)
		next := pod("renderfail-a", "web-2", "web", map[string]string{"app": "web"})
		Consistently(paths(parentOf("renderfail")), 2*resync).Should(Equal([]string{"/ns/renderfail-a/sa/web"}))
		Expect(keptSpiffeIDs()).To(HaveLen(1))

		// Deselected, the workload's entry goes once no pod needs it.
		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "renderfail-none"}}
		})).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Eventually(keptSpiffeIDs).Should(BeEmpty())
		deletePod(next)
		Eventually(paths(parentOf("renderfail"))).Should(BeEmpty())
	})

	It("keeps the last good entry of a workload whose render fails only while it is selected; deselected, only while its pods run", func() {
		namespace("lastgood-a", map[string]string{"test": "lastgood"})
		createSA("lastgood-a", "web")
		deployment("lastgood-a", "web", "web", nil)
		p := policyFor("lastgood", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("lastgood"))).Should(Equal([]string{"/ns/lastgood-a/sa/web"}))
		running := pod("lastgood-a", "web-1", "web", map[string]string{"app": "web"})

		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.SpiffeIDTemplate = "team/{label:team}/{serviceAccount}"
		})).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("False/InvalidSpiffeIDTemplate"))
		Consistently(paths(parentOf("lastgood")), resync).Should(Equal([]string{"/ns/lastgood-a/sa/web"}))

		// The policy no longer selects the namespace: the last good render
		// goes, and only the running pod keeps the entry.
		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "lastgood-none"}}
		})).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Consistently(paths(parentOf("lastgood")), resync).Should(Equal([]string{"/ns/lastgood-a/sa/web"}))
		deletePod(running)
		Eventually(paths(parentOf("lastgood"))).Should(BeEmpty())
	})

	It("judges an entry only by the pods of its own namespace and service account", func() {
		ns := namespace("crossns-a", map[string]string{"test": "crossns"})
		namespace("crossns-b", nil)
		createSA("crossns-a", "web")
		createSA("crossns-b", "web")
		createSA("crossns-a", "other")
		deployment("crossns-a", "web", "web", nil)
		// Pods of the same service account name and labels in another
		// namespace, and of another service account in the same namespace.
		elsewhere := pod("crossns-b", "web-1", "web", map[string]string{"app": "web"})
		otherSA := pod("crossns-a", "other-1", "other", map[string]string{"app": "web"})
		Expect(k8s.Create(ctx, policyFor("crossns", nil))).To(Succeed())
		Eventually(paths(parentOf("crossns"))).Should(Equal([]string{"/ns/crossns-a/sa/web"}))

		patch := client.MergeFrom(ns.DeepCopy())
		ns.Labels = nil
		Expect(k8s.Patch(ctx, ns, patch)).To(Succeed())
		Eventually(paths(parentOf("crossns"))).Should(BeEmpty())
		deletePod(elsewhere)
		deletePod(otherSA)
	})

	It("does not let a pod created after its namespace left the policy keep the entry alive", func() {
		ns := namespace("revoke-a", map[string]string{"test": "revoke"})
		createSA("revoke-a", "web")
		deployment("revoke-a", "web", "web", nil)
		before := pod("revoke-a", "web-1", "web", map[string]string{"app": "web"})
		Expect(k8s.Create(ctx, policyFor("revoke", nil))).To(Succeed())
		Eventually(paths(parentOf("revoke"))).Should(Equal([]string{"/ns/revoke-a/sa/web"}))

		// The namespace loses the label the policy selects: its identity is
		// revoked, kept only for the pod that ran when that happened.
		patch := client.MergeFrom(ns.DeepCopy())
		ns.Labels = nil
		Expect(k8s.Patch(ctx, ns, patch)).To(Succeed())
		Consistently(paths(parentOf("revoke")), resync).Should(Equal([]string{"/ns/revoke-a/sa/web"}))

		// A tenant of the namespace starts pods of the same shape, one after
		// the other, to keep the entry alive once the old pod is gone.
		after := pod("revoke-a", "web-2", "web", map[string]string{"app": "web"})
		deletePod(before)
		Eventually(paths(parentOf("revoke")), 2*resync).Should(BeEmpty())
		deletePod(after)
	})

	It("does not let a pod relabelled after a workload's removal keep the removed workload's entry alive", func() {
		namespace("relabel-a", map[string]string{"test": "relabel"})
		createSA("relabel-a", "shared")
		canary := deployment("relabel-a", "canary", "shared", nil)
		canaryPod := pod("relabel-a", "canary-1", "shared", map[string]string{"app": "canary"})
		// A long-lived pod of the same service account that no selected
		// workload owns.
		other := pod("relabel-a", "other-1", "shared", map[string]string{"app": "other"})
		Expect(k8s.Create(ctx, policyFor("relabel", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/{name}"
		}))).To(Succeed())
		Eventually(paths(parentOf("relabel"))).Should(Equal([]string{"/ns/relabel-a/canary"}))

		// The canary is removed; its pod still runs and keeps the entry.
		Expect(k8s.Delete(ctx, canary)).To(Succeed())
		Consistently(paths(parentOf("relabel")), resync).Should(Equal([]string{"/ns/relabel-a/canary"}))

		// A tenant relabels the other pod into the canary's shape, then the
		// canary's pod goes.
		patch := client.MergeFrom(other.DeepCopy())
		other.Labels = map[string]string{"app": "canary"}
		Expect(k8s.Patch(ctx, other, patch)).To(Succeed())
		deletePod(canaryPod)
		Eventually(paths(parentOf("relabel")), 2*resync).Should(BeEmpty())
		deletePod(other)
	})
})

var _ = Describe("An entry SPIRE refuses", func() {
	It("does not take away the entry it was to replace while a pod still runs under that one", func() {
		namespace("refused-a", nil)
		createSA("refused-a", "x")
		running := pod("refused-a", "x-1", "x", nil)
		e := spiffeEntry("refused", func(s *v1alpha1.SpiffeEntrySpec) {
			s.ParentID = parentOf("refused")
			s.Selectors = []string{"k8s:ns:refused-a", "k8s:sa:x"}
		})
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(paths(parentOf("refused"))).Should(Equal([]string{"/vm/refused"}))
		oldID := entryAt(parentOf("refused"), "/vm/refused").Id

		// A new SPIFFE ID, with a DNS name SPIRE refuses: the new entry is
		// not created, and the running pod keeps the old one.
		Expect(testenv.Edit(ctx, k8s, e, func(e *v1alpha1.SpiffeEntry) {
			e.Spec.SpiffeID = "spiffe://" + trustDomain + "/vm/refused-2"
			e.Spec.DNSNames = []string{"-bad-.example"}
		})).To(Succeed())
		Eventually(entryReady(e)).Should(Equal("False/EntryRejected"))
		Consistently(func() string {
			if x := entryAt(parentOf("refused"), "/vm/refused"); x != nil {
				return x.Id
			}
			return "absent"
		}, 2*resync).Should(Equal(oldID))

		// Fixed: the new entry comes, and only then the old one goes.
		Expect(testenv.Edit(ctx, k8s, e, func(e *v1alpha1.SpiffeEntry) { e.Spec.DNSNames = nil })).To(Succeed())
		Eventually(paths(parentOf("refused")), 2*resync).Should(Equal([]string{"/vm/refused-2"}))
		deletePod(running)
	})
})

var _ = Describe("Entries no pod can match", func() {
	It("are not kept for pods: an entry whose selectors name two namespaces goes as soon as it is no longer wanted", func() {
		namespace("conflict-b", nil)
		createSA("conflict-b", "x")
		running := pod("conflict-b", "x-1", "x", nil)
		e := spiffeEntry("conflict", func(s *v1alpha1.SpiffeEntrySpec) {
			s.ParentID = parentOf("conflict")
			s.Selectors = []string{"k8s:ns:conflict-a", "k8s:ns:conflict-b", "k8s:sa:x"}
		})
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(paths(parentOf("conflict"))).Should(Equal([]string{"/vm/conflict"}))

		// SPIRE selectors all have to match, so no pod matches both
		// namespaces: the running pod in one of them needs nothing.
		Expect(testenv.Edit(ctx, k8s, e, func(e *v1alpha1.SpiffeEntry) {
			e.Spec.SpiffeID = "spiffe://" + trustDomain + "/vm/conflict-2"
			e.Spec.Selectors = []string{"k8s:ns:conflict-c", "k8s:sa:y"}
		})).To(Succeed())
		Eventually(paths(parentOf("conflict")), 2*resync).Should(Equal([]string{"/vm/conflict-2"}))
		deletePod(running)
	})
})

var _ = Describe("Templates without {namespace}", func() {
	It("render the same SPIFFE ID for workloads of two namespaces when their labels say so", func() {
		namespace("tplns-a", map[string]string{"test": "tplns"})
		namespace("tplns-b", map[string]string{"test": "tplns"})
		deployment("tplns-a", "payments", "api", map[string]string{"app": "payments", "team": "payments"})
		Expect(k8s.Create(ctx, policyFor("tplns", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "team/{label:team}/{serviceAccount}"
		}))).To(Succeed())
		Eventually(paths(parentOf("tplns"))).Should(Equal([]string{"/team/payments/api"}))

		// Whoever may create Deployments in the other namespace gets the
		// same identity, with selectors of their own namespace.
		deployment("tplns-b", "copy", "api", map[string]string{"app": "copy", "team": "payments"})
		Eventually(func() [][]string {
			var out [][]string
			for _, e := range entriesUnder(parentOf("tplns")) {
				out = append(out, append([]string{e.SpiffeId.Path}, selectorsOf(e)...))
			}
			sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], " ") < strings.Join(out[j], " ") })
			return out
		}).Should(Equal([][]string{
			{"/team/payments/api", "k8s:ns:tplns-a", "k8s:pod-label:app:payments", "k8s:pod-label:team:payments", "k8s:sa:api"},
			{"/team/payments/api", "k8s:ns:tplns-b", "k8s:pod-label:app:copy", "k8s:pod-label:team:payments", "k8s:sa:api"},
		}))
	})
})

var _ = Describe("Large replies", func() {
	It("reads a parent whose entries exceed gRPC's default 4 MiB at the default page size, "+
		"and halves the page size when a page exceeds the receive limit", func() {
		const n = 1000
		parent := spiffeid.RequireFromString(parentOf("large"))
		long := strings.Repeat("a", 60)
		var in []*types.Entry
		for i := range n {
			e := entries.Entry{
				SpiffeID:  spiffeid.RequireFromString(fmt.Sprintf("spiffe://%s/large/%d", trustDomain, i)),
				ParentID:  parent,
				Selectors: []entries.Selector{{Type: "unix", Value: fmt.Sprintf("uid:%d", i)}},
				Hint:      strings.Repeat("h", 1024),
			}
			for j := range 16 {
				e.DNSNames = append(e.DNSNames, fmt.Sprintf("%s.%s.%s.n%d-%d.example", long, long, long, i, j))
			}
			e.Normalize()
			in = append(in, e.Proto(fmt.Sprintf("large-%d", i)))
		}
		res, err := spireAPI.Create(ctx, in)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range res {
			Expect(r.Code.String()).To(Equal("OK"), r.Message)
		}
		Expect(proto.Size(&entryv1.ListEntriesResponse{Entries: in})).To(BeNumerically(">", 4<<20),
			"the entries do not cross gRPC's default limit at the default page size")
		DeferCleanup(func() {
			ids := make([]string, len(in))
			for i, e := range in {
				ids[i] = e.Id
			}
			_, err := spireAPI.Delete(ctx, ids)
			Expect(err).NotTo(HaveOccurred())
		})

		conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
		Expect(err).NotTo(HaveOccurred())
		defer closer.Close()
		list, err := spire.NewClient(conn, spire.Options{PageSize: 1000}).ListByParent(ctx, parent)
		Expect(err).NotTo(HaveOccurred())
		Expect(list).To(HaveLen(n))

		small := spire.NewClient(conn, spire.Options{PageSize: 1000, MaxReceiveBytes: 1 << 20})
		list, err = small.ListByParent(ctx, parent)
		Expect(err).NotTo(HaveOccurred())
		Expect(list).To(HaveLen(n))
	})
})

var _ = Describe("Without a resync to fall back on", Ordered, func() {
	// An operator whose resync is far away: what these specs see happen,
	// the operator did on its own timer or on an event, not at a resync.
	BeforeAll(func() {
		stopOperator()
		op, stopOperator = launch(cp.Config, func(o *operator.Options) { o.Config.RequeueAfter = 10 * time.Minute })
		DeferCleanup(func() {
			stopOperator()
			startOperator()
		})
	})

	It("creates an entry masked by a hand-made one within seconds of its deletion", func() {
		e := spiffeEntry("foreign-mask", func(s *v1alpha1.SpiffeEntrySpec) { s.ParentID = parentOf("foreign-mask") })
		out, err := srv.CLI(ctx, "entry", "create", "-parentID", parentOf("foreign-mask"),
			"-spiffeID", e.Spec.SpiffeID, "-selector", e.Spec.Selectors[0])
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(paths(parentOf("foreign-mask"))).Should(HaveLen(1))
		foreign := entriesUnder(parentOf("foreign-mask"))[0].Id
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(func() string {
			_ = entryReady(e)()
			for _, c := range e.Status.Conditions {
				if c.Type == "Masked" && c.Status == metav1.ConditionTrue {
					return c.Reason
				}
			}
			return ""
		}).Should(Equal("MaskedByForeignEntry"))

		out, err = srv.CLI(ctx, "entry", "delete", "-entryID", foreign)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() string {
			if got := entryAt(parentOf("foreign-mask"), "/vm/foreign-mask"); got != nil {
				return got.Id
			}
			return ""
		}, 15*time.Second).Should(HavePrefix(op.EntryIDPrefix + entries.OwnerTag(e.UID) + "."))
		Eventually(entryReady(e)).Should(Equal("True/Ready"))
	})

	It("recreates an entry deleted by hand when a later edit finds it gone (SpireChanged)", func() {
		namespace("stale-a", map[string]string{"test": "stale"})
		deployment("stale-a", "web", "web", nil)
		p := policyFor("stale", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("stale"))).Should(HaveLen(1))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		id := entriesUnder(parentOf("stale"))[0].Id

		out, err := srv.CLI(ctx, "entry", "delete", "-entryID", id)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.X509SVIDTTL = &metav1.Duration{Duration: 20 * time.Minute}
		})).To(Succeed())
		// The pass updates an entry its view still holds; SPIRE answers
		// NotFound; the retry re-reads SPIRE and creates it with the same ID.
		Eventually(func() int32 {
			if got := entryAt(parentOf("stale"), "/ns/stale-a/sa/web"); got != nil && got.Id == id {
				return got.X509SvidTtl
			}
			return -1
		}).Should(Equal(int32(1200)))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
	})
})

var _ = Describe("Incremental passes against SPIRE", func() {
	It("end where a full pass would", func() {
		namespace("incr-a", map[string]string{"test": "incr"})
		ds := make(map[string]*appsv1.Deployment)
		for _, n := range []string{"a", "b", "c", "d"} {
			ds[n] = deployment("incr-a", n, "sa-"+n, map[string]string{"app": n, "team": "t-" + n})
		}
		p := policyFor("incr", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.DNSNameTemplates = []string{"{serviceAccount}.{namespace}.svc"}
			s.WorkloadSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("incr"))).Should(HaveLen(4))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))

		// Single-workload changes, each served by an incremental pass: a
		// service account now shared, a workload leaving the selection, one
		// deleted, one added.
		edit := func(d *appsv1.Deployment, mut func(*appsv1.Deployment)) {
			patch := client.MergeFrom(d.DeepCopy())
			mut(d)
			Expect(k8s.Patch(ctx, d, patch)).To(Succeed())
		}
		edit(ds["a"], func(d *appsv1.Deployment) { d.Spec.Template.Spec.ServiceAccountName = "sa-b" })
		edit(ds["c"], func(d *appsv1.Deployment) { d.Labels = map[string]string{"app": "c", "team": "t-c", "skip": "yes"} })
		Expect(k8s.Delete(ctx, ds["d"])).To(Succeed())
		deployment("incr-a", "e", "sa-e", nil)
		Eventually(paths(parentOf("incr"))).Should(Equal([]string{"/ns/incr-a/sa/sa-b", "/ns/incr-a/sa/sa-e"}))
		snapshot := func() []string {
			var out []string
			for _, e := range entriesUnder(parentOf("incr")) {
				out = append(out, fmt.Sprintf("%s %s %v %v %d", e.Id, e.SpiffeId.Path, selectorsOf(e), e.DnsNames, e.X509SvidTtl))
			}
			sort.Strings(out)
			return out
		}
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		after := snapshot()
		Expect(after).To(ContainElement(ContainSubstring("[sa-b.incr-a.svc]")))

		// A restart makes a full pass from nothing but SPIRE and the cache.
		whileOperatorDown(func() {})
		Consistently(snapshot, 2*resync).Should(Equal(after))
		Eventually(func() int32 { _ = policyReady(p)(); return p.Status.EntriesRegistered }).Should(Equal(int32(2)))
	})
})

var _ = Describe("Orphans", func() {
	It("are collected after a restart under a parent ID no remaining object uses", func() {
		e := spiffeEntry("orphan-only", func(s *v1alpha1.SpiffeEntrySpec) { s.ParentID = parentOf("orphan-only") })
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(paths(parentOf("orphan-only"))).Should(Equal([]string{"/vm/orphan-only"}))
		Eventually(entryReady(e)).Should(Equal("True/Ready"))

		// Removed while the operator is down, finalizer and all.
		whileOperatorDown(func() {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
			patch := client.MergeFrom(e.DeepCopy())
			e.Finalizers = nil
			Expect(k8s.Patch(ctx, e, patch)).To(Succeed())
			Expect(k8s.Delete(ctx, e)).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)) }).Should(BeTrue())
		})
		Eventually(paths(parentOf("orphan-only")), 2*resync).Should(BeEmpty())
	})
})

var _ = Describe("The entry ID space", func() {
	It("is the ownership claim: a hand-made entry with an ID of the operator's exact shape is treated as its own, any other is left alone", func() {
		namespace("idspace-a", map[string]string{"test": "idspace"})
		deployment("idspace-a", "web", "web", nil)
		p := policyFor("idspace", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("idspace"))).Should(Equal([]string{"/ns/idspace-a/sa/web"}))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())

		handMade := func(path, id string) *types.Entry {
			e := entries.Entry{
				SpiffeID:  spiffeid.RequireFromString("spiffe://" + trustDomain + path),
				ParentID:  spiffeid.RequireFromString(parentOf("idspace")),
				Selectors: []entries.Selector{{Type: "k8s", Value: "ns:idspace-hand"}, {Type: "k8s", Value: "sa:" + strings.TrimPrefix(path, "/hand/")}},
			}
			e.Normalize()
			return e.Proto(id)
		}
		hash := "0123456789abcdef0123"
		in := []*types.Entry{
			// Exact shape, an owner tag no object has: an orphan.
			handMade("/hand/orphan", op.EntryIDPrefix+"0123456789ab."+hash),
			// Exact shape, the policy's tag: an entry the policy does not want.
			handMade("/hand/claimed", op.EntryIDPrefix+entries.OwnerTag(p.UID)+"."+hash),
			// Not the exact shape (upper-case hex, a longer hash, another
			// prefix): foreign.
			handMade("/hand/upper", op.EntryIDPrefix+"0123456789AB."+hash),
			handMade("/hand/long", op.EntryIDPrefix+"0123456789ab."+hash+"0"),
			handMade("/hand/other", "other."+"0123456789ab."+hash),
		}
		res, err := spireAPI.Create(ctx, in)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range res {
			Expect(r.Code.String()).To(Equal("OK"), r.Message)
		}
		DeferCleanup(func() {
			_, err := spireAPI.Delete(ctx, []string{in[2].Id, in[3].Id, in[4].Id})
			Expect(err).NotTo(HaveOccurred())
		})

		want := []string{"/hand/long", "/hand/other", "/hand/upper", "/ns/idspace-a/sa/web"}
		Eventually(paths(parentOf("idspace")), 2*resync).Should(Equal(want))
		Consistently(paths(parentOf("idspace")), resync).Should(Equal(want))
	})
})

var _ = Describe("A refusal a tenant provokes", func() {
	It("does not keep an identity the policy withdrew from another workload of the account", func() {
		namespace("withdrawn-a", map[string]string{"test": "withdrawn"})
		createSA("withdrawn-a", "shop")
		deployment("withdrawn-a", "web", "shop", map[string]string{"app": "web"})
		p := policyFor("withdrawn", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}/{name}"
			s.DNSNameTemplates = []string{"{name}.{namespace}.svc"}
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("withdrawn"))).Should(Equal([]string{"/ns/withdrawn-a/sa/shop/web"}))

		// A tenant of the namespace names a Deployment of the same account
		// so that SPIRE refuses its DNS name ("--" in the third and fourth
		// characters, which Kubernetes allows).
		deployment("withdrawn-a", "ab--x", "shop", map[string]string{"app": "ab--x"})
		Eventually(func() []string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			var failed []string
			for _, f := range p.Status.Failures {
				failed = append(failed, f.Object)
			}
			return failed
		}).Should(ContainElement(HaveSuffix("/ns/withdrawn-a/sa/shop/ab--x")))

		// The admin withdraws web, of which no pod runs: its entry goes,
		// though SPIRE still refuses the tenant's.
		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.WorkloadSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"web"}}}}
		})).To(Succeed())
		Eventually(paths(parentOf("withdrawn")), 2*resync).Should(BeEmpty())
	})
})
