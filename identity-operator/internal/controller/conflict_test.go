package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
)

// holdFinalizer keeps an output in deletion until a test releases it.
const holdFinalizer = "test.trustplane.dev/hold"

func conflictsOf(ctx context.Context, ns, name string) func(Gomega) []v1alpha1.Conflict {
	return func(g Gomega) []v1alpha1.Conflict { return getBinding(ctx, ns, name)(g).Status.Conflicts }
}

var _ = Describe("Conflicts: pairwise, recorded on both sides, members keep no output", func() {
	It("VariantConflict: same namespace, service account and variant; withdrawal and recovery", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		createDeployment(ctx, ns, "web2", webSelector("web2"), map[string]string{"app": "web2"})
		a := createBinding(ctx, ns, "a", "serving", "v1")
		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal("True"))
		Expect(entryExists(ctx, ns, a.Name)()).To(BeTrue())

		b := createBinding(ctx, ns, "b", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "web2"))
		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal(v1alpha1.ReasonVariantConflict))
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonVariantConflict))
		idOf := func(pool string) string {
			return "spiffe://example.org/ns/" + ns + "/sa/serving/pool/" + pool + "/variant/v1"
		}
		Expect(conflictsOf(ctx, ns, a.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns + "/b", Cause: v1alpha1.ReasonVariantConflict, PeerSPIFFEID: idOf("web2"), PeerVariant: "v1"}}))
		Expect(conflictsOf(ctx, ns, b.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns + "/a", Cause: v1alpha1.ReasonVariantConflict, PeerSPIFFEID: idOf("web"), PeerVariant: "v1"}}))
		Expect(getBinding(ctx, ns, a.Name)(Default).Status.SPIFFEID).To(BeEmpty(), "status.spiffeID is set only while Ready")
		Expect(failures(getBinding(ctx, ns, a.Name)(Default))).To(Equal([]string{"Conflict=VariantConflict"}))

		By("the conflict members' outputs are withdrawn")
		Eventually(entryExists(ctx, ns, a.Name)).Should(BeFalse())
		Eventually(clusterSPIFFEIDExists(ctx, ns, a.Name)).Should(BeFalse())
		Consistently(entryExists(ctx, ns, b.Name), time.Second, 100*time.Millisecond).Should(BeFalse())
		Eventually(func(g Gomega) string {
			return findMessage(getBinding(ctx, ns, a.Name)(g), v1alpha1.ConditionConflict)
		}).Should(ContainSubstring("no output is kept"))

		By("a different variant resolves the conflict and outputs return")
		Eventually(func(g Gomega) {
			cur := getBinding(ctx, ns, b.Name)(g)
			cur.Spec.IdentityBoundary.Variant = "v2"
			g.Expect(k8s.Update(ctx, cur)).To(Succeed())
		}).Should(Succeed())
		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal("True"))
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		Expect(conflictsOf(ctx, ns, a.Name)(Default)).To(BeEmpty())
		Expect(entryExists(ctx, ns, a.Name)()).To(BeTrue())
		Expect(entryExists(ctx, ns, b.Name)()).To(BeTrue())
		Expect(failures(getBinding(ctx, ns, a.Name)(Default))).To(BeEmpty())
	}, SpecTimeout(time.Minute))

	It("DuplicateSPIFFEID between variants that render the same ID; deleting a peer lets the other recover", func(ctx context.Context) {
		ns1 := newNamespace(ctx)
		ns2 := ns1
		createDeployment(ctx, ns1, "web", webSelector("web"), map[string]string{"app": "web"})
		shared := withTemplate("ns/{namespace}/sa/{serviceAccount}/shared")
		a := createBinding(ctx, ns1, "a", "serving", "v1", shared)
		Eventually(readyReason(ctx, ns1, a.Name)).Should(Equal("True"))
		b := createBinding(ctx, ns2, "b", "serving", "v2", shared)
		Eventually(readyReason(ctx, ns1, a.Name)).Should(Equal(v1alpha1.ReasonDuplicateSPIFFEID))
		Eventually(readyReason(ctx, ns2, b.Name)).Should(Equal(v1alpha1.ReasonDuplicateSPIFFEID))
		sharedID := "spiffe://example.org/ns/" + ns1 + "/sa/serving/shared"
		Expect(conflictsOf(ctx, ns1, a.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns2 + "/b", Cause: v1alpha1.ReasonDuplicateSPIFFEID, PeerSPIFFEID: sharedID, PeerVariant: "v2"}}))
		Expect(conflictsOf(ctx, ns2, b.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns1 + "/a", Cause: v1alpha1.ReasonDuplicateSPIFFEID, PeerSPIFFEID: sharedID, PeerVariant: "v1"}}))
		Eventually(entryExists(ctx, ns1, a.Name)).Should(BeFalse())

		By("deleting one member lets the other recover")
		deleteBinding(ctx, ns2, b.Name)
		Eventually(readyReason(ctx, ns1, a.Name)).Should(Equal("True"))
		Eventually(entryExists(ctx, ns1, a.Name)).Should(BeTrue())
	}, SpecTimeout(time.Minute))

	It("no conflict across namespaces, service accounts or variants", func(ctx context.Context) {
		ns, other := newNamespace(ctx), newNamespace(ctx)
		for _, n := range []string{ns, other} {
			createDeployment(ctx, n, "web", webSelector("web"), map[string]string{"app": "web"})
		}
		createBinding(ctx, ns, "sa1", "one", "v1")
		createBinding(ctx, other, "sa1", "one", "v1")
		createBinding(ctx, ns, "sa2", "two", "v1")
		createBinding(ctx, ns, "sa1-v2", "one", "v2")
		for _, key := range [][2]string{{ns, "sa1"}, {other, "sa1"}, {ns, "sa2"}, {ns, "sa1-v2"}} {
			Eventually(readyReason(ctx, key[0], key[1])).Should(Equal("True"), "%s/%s", key[0], key[1])
			Expect(conflictsOf(ctx, key[0], key[1])(Default)).To(BeEmpty())
		}
	}, SpecTimeout(time.Minute))

	It("a peer whose own spec is refused holds no output and does not count", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		createDeployment(ctx, ns, "web2", webSelector("web2"), map[string]string{"app": "web2"})
		createBinding(ctx, ns, "a", "serving", "v1")
		createBinding(ctx, ns, "long-ttl", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "web2"), func(b *v1alpha1.IdentityBinding) {
			b.Spec.X509SVIDTTL = &metav1.Duration{Duration: 48 * time.Hour}
		})
		createBinding(ctx, ns, "outside", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "web2"), withTemplate("shared/{serviceAccount}"))
		Eventually(readyReason(ctx, ns, "long-ttl")).Should(Equal(v1alpha1.ReasonSVIDTTLTooLong))
		Eventually(readyReason(ctx, ns, "outside")).Should(Equal(v1alpha1.ReasonSPIFFEIDOutsideServiceAccount))
		Eventually(readyReason(ctx, ns, "a")).Should(Equal("True"))
		Consistently(func(g Gomega) {
			g.Expect(readyReason(ctx, ns, "a")(g)).To(Equal("True"))
			g.Expect(conflictsOf(ctx, ns, "a")(g)).To(BeEmpty())
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(time.Minute))

	It("a peer being deleted counts until its output is confirmed gone", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		createDeployment(ctx, ns, "web2", webSelector("web2"), map[string]string{"app": "web2"})
		b := createBinding(ctx, ns, "b", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "web2"))
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		By("holding b's SpiffeEntry, so that its deletion cannot complete")
		Eventually(func(g Gomega) {
			e := getEntry(ctx, ns, b.Name)(g)
			e.Finalizers = append(e.Finalizers, holdFinalizer)
			g.Expect(k8s.Update(ctx, e)).To(Succeed())
		}).Should(Succeed())

		a := createBinding(ctx, ns, "a", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonVariantConflict))
		Eventually(func(g Gomega) string {
			return findMessage(getBinding(ctx, ns, b.Name)(g), v1alpha1.ConditionConflict)
		}).Should(ContainSubstring("outputs are being withdrawn"), "b's conflict is not settled while its output exists")

		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal(v1alpha1.ReasonVariantConflict), "the conflict is recorded on both sides")

		By("deleting b: it stays, and keeps a in conflict, until its output is gone")
		Expect(k8s.Delete(ctx, getBinding(ctx, ns, b.Name)(Default))).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(readyReason(ctx, ns, a.Name)(g)).To(Equal(v1alpha1.ReasonVariantConflict))
			g.Expect(getBinding(ctx, ns, b.Name)(g).DeletionTimestamp).NotTo(BeNil())
			g.Expect(entryExists(ctx, ns, a.Name)()).To(BeFalse())
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

		By("releasing b's output lets b go and a recover")
		Eventually(func(g Gomega) {
			e := getEntry(ctx, ns, b.Name)(g)
			e.Finalizers = nil
			g.Expect(k8s.Update(ctx, e)).To(Succeed())
		}).Should(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.Name}, &v1alpha1.IdentityBinding{}))
		}).Should(BeTrue())
		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal("True"))
		Expect(entryExists(ctx, ns, a.Name)()).To(BeTrue())
		Expect(conflictsOf(ctx, ns, a.Name)(Default)).To(BeEmpty())
	}, SpecTimeout(time.Minute))

	It("PeerOutputPending: no output while another binding's output for the same workloads exists", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		stale := &spiffev1alpha1.SpiffeEntry{
			ObjectMeta: metav1.ObjectMeta{Name: "stale-" + ns, Labels: map[string]string{
				labels.Environment: environment, labels.OwnerUID: "a-binding-that-is-gone",
				index.LabelGroup: index.GroupKey(ns, "serving", "v1"),
			}},
			Spec: spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/old", ParentID: parentID, Selectors: []string{"k8s:ns:" + ns}},
		}
		Expect(k8s.Create(ctx, stale)).To(Succeed())
		a := createBinding(ctx, ns, "a", "serving", "v1")
		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal(v1alpha1.ReasonPeerOutputPending))
		Consistently(entryExists(ctx, ns, a.Name), time.Second, 100*time.Millisecond).Should(BeFalse())
		Expect(failures(getBinding(ctx, ns, a.Name)(Default))).To(BeEmpty())

		Expect(k8s.Delete(ctx, stale)).To(Succeed())
		Eventually(readyReason(ctx, ns, a.Name)).Should(Equal("True"))
		Expect(entryExists(ctx, ns, a.Name)()).To(BeTrue())
	}, SpecTimeout(time.Minute))
})

func findMessage(b *v1alpha1.IdentityBinding, condType string) string {
	for _, c := range b.Status.Conditions {
		if c.Type == condType {
			return c.Message
		}
	}
	return ""
}
