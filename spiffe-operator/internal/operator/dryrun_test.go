package operator_test

import (
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

var _ = Describe("Dry run", func() {
	It("writes nothing to SPIRE, not even the deletion of an orphan, and says so on every object", func() {
		namespace("dryrun-a", map[string]string{"test": "dryrun"})
		deployment("dryrun-a", "web", "web", nil)
		// An entry of the operator's ID shape whose owner does not exist: a
		// real run collects it as an orphan.
		orphanID := op.EntryIDPrefix + "0123456789ab.0123456789abcdef0123"
		res, err := spireAPI.Create(ctx, []*types.Entry{{Id: orphanID,
			SpiffeId:  &types.SPIFFEID{TrustDomain: trustDomain, Path: "/orphan"},
			ParentId:  &types.SPIFFEID{TrustDomain: trustDomain, Path: "/spire/agent/k8s_psat/dryrun"},
			Selectors: []*types.Selector{{Type: "k8s", Value: "ns:dryrun-a"}}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res[0].Code).To(Equal(codes.OK))
		p := policyFor("dryrun", nil)
		e := &v1alpha1.SpiffeEntry{Spec: v1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/vm/dryrun",
			ParentID: parentOf("dryrun"), Selectors: []string{"unix:uid:1000"}}}
		e.Name = "dryrun"
		f := federation("dryrun", "dryrun.test", nil)

		whileOperatorDown(func() {
			_, stop := launch(cp.Config, func(o *operator.Options) { o.DryRun = true })
			defer stop()
			Expect(k8s.Create(ctx, p)).To(Succeed())
			Expect(k8s.Create(ctx, e)).To(Succeed())
			Eventually(policyReady(p)).Should(Equal("False/DryRun"))
			Expect(k8s.Create(ctx, f)).To(Succeed())
			Eventually(entryReady(e)).Should(Equal("False/DryRun"))
			Eventually(federationReady(f)).Should(Equal("False/DryRun"))
			Expect(f.Status.RelationshipTrustDomain).To(BeEmpty())
			// The counts are those that would be registered.
			Expect(p.Status.EntriesRegistered).To(BeEquivalentTo(1))
			Consistently(paths(parentOf("dryrun")), resync).Should(Equal([]string{"/orphan"}))
			Expect(entryAt(parentOf("dryrun"), "/orphan").Id).To(Equal(orphanID))
			Expect(relationship("dryrun.test")).To(BeNil())
		})
		// The real run then does what the dry run reported.
		Eventually(paths(parentOf("dryrun"))).Should(Equal([]string{"/ns/dryrun-a/sa/web", "/vm/dryrun"}))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Eventually(endpointOf("dryrun.test")).Should(Equal(f.Spec.BundleEndpointURL))
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
	})
})

var _ = Describe("Migration from spire-controller-manager", func() {
	It("registers beside entries of SCM's shape without touching them, so they can be deleted after the switch "+
		"without a moment without an entry", func() {
		namespace("migrate-a", map[string]string{"test": "migrate"})
		createSA("migrate-a", "web")
		deployment("migrate-a", "web", "web", nil)
		n := createNode("migrate-1")
		p1 := podOn("migrate-a", "web-1", "web", n.Name, map[string]string{"app": "web"}, nil)
		// What SCM registered for the pod: its entryIDPrefix, one k8s:pod-uid
		// selector, under the node's k8s_psat agent ID.
		scmID := "scm.migrate-a-web-1"
		res, err := spireAPI.Create(ctx, []*types.Entry{{Id: scmID,
			SpiffeId:  &types.SPIFFEID{TrustDomain: trustDomain, Path: "/ns/migrate-a/sa/web"},
			ParentId:  &types.SPIFFEID{TrustDomain: trustDomain, Path: "/spire/agent/k8s_psat/" + clusterName + "/" + string(n.UID)},
			Selectors: []*types.Selector{{Type: "k8s", Value: "pod-uid:" + string(p1.UID)}}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res[0].Code).To(Equal(codes.OK))

		p := perNodePolicy("migrate", func(s *v1alpha1.SpiffeRegistrationSpec) { s.EntryGranularity = v1alpha1.EntryPerPod })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(entryIDsAt(agentOf(n))).Should(HaveLen(2))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		var ours string
		for _, id := range entryIDsAt(agentOf(n))() {
			if id != scmID {
				ours = id
			}
		}
		Expect(ours).To(HavePrefix(op.EntryIDPrefix))
		Consistently(entryIDsAt(agentOf(n)), resync).Should(ConsistOf(scmID, ours))

		// Switching over: SCM's entry goes (SCM uninstalled); ours stays.
		_, err = spireAPI.Delete(ctx, []string{scmID})
		Expect(err).NotTo(HaveOccurred())
		Consistently(entryIDsAt(agentOf(n)), resync).Should(Equal([]string{ours}))
	})
})

// SCM's ClusterSPIFFEID selects pods, whatever created them; a
// SpiffeRegistration selects the workloads of its workloadKinds
// (Deployments by default) unless it has a podSelector. The migration
// guide translates one into a policy with a podSelector: this spec shows
// why, before SCM's entries are deleted.
var _ = Describe("Translating a ClusterSPIFFEID for the migration", func() {
	It("covers the pods of every controller only with a podSelector; the default policy registers Deployments' alone", func() {
		const ns = "migrate-kinds"
		namespace(ns, map[string]string{"migrate": "kinds"})
		for _, sa := range []string{"web", "db", "agent", "debug"} {
			createSA(ns, sa)
		}
		deployment(ns, "web", "web", nil)
		statefulSet(ns, "db", "db")
		podOn(ns, "db-0", "db", "", map[string]string{"app": "db"}, ownedBy("apps/v1", "StatefulSet", "db"))
		podOn(ns, "agent-x7", "agent", "", map[string]string{"app": "agent"}, ownedBy("apps/v1", "DaemonSet", "agent"))
		podOn(ns, "debug", "debug", "", nil, nil)
		selectNamespace := func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"migrate": "kinds"}}
		}

		byDefault := policyFor("migrate-default", selectNamespace)
		Expect(k8s.Create(ctx, byDefault)).To(Succeed())
		Eventually(policyReady(byDefault)).Should(Equal("True/Ready"))
		Consistently(paths(parentOf("migrate-default")), resync).Should(Equal([]string{"/ns/" + ns + "/sa/web"}),
			"the default policy registers the Deployment's workload only")

		everyPod := policyFor("migrate-pods", func(s *v1alpha1.SpiffeRegistrationSpec) {
			selectNamespace(s)
			s.PodSelector = &metav1.LabelSelector{}
		})
		Expect(k8s.Create(ctx, everyPod)).To(Succeed())
		Eventually(paths(parentOf("migrate-pods"))).Should(Equal([]string{
			"/ns/" + ns + "/sa/agent", "/ns/" + ns + "/sa/db", "/ns/" + ns + "/sa/debug"}))
		Eventually(policyReady(everyPod)).Should(Equal("True/Ready"))
	})
})
