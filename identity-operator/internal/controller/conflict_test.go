package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

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
		Expect(conflictsOf(ctx, ns, a.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns + "/b", Cause: v1alpha1.ReasonVariantConflict}}))
		Expect(conflictsOf(ctx, ns, b.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns + "/a", Cause: v1alpha1.ReasonVariantConflict}}))
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

	It("DuplicateSPIFFEID across namespaces; a deleted peer counts until its output is gone", func(ctx context.Context) {
		ns1, ns2 := newNamespace(ctx), newNamespace(ctx)
		for _, ns := range []string{ns1, ns2} {
			createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		}
		shared := withTemplate("shared/{serviceAccount}")
		a := createBinding(ctx, ns1, "a", "serving", "v1", shared)
		Eventually(readyReason(ctx, ns1, a.Name)).Should(Equal("True"))
		b := createBinding(ctx, ns2, "b", "serving", "v2", shared)
		Eventually(readyReason(ctx, ns1, a.Name)).Should(Equal(v1alpha1.ReasonDuplicateSPIFFEID))
		Eventually(readyReason(ctx, ns2, b.Name)).Should(Equal(v1alpha1.ReasonDuplicateSPIFFEID))
		Expect(conflictsOf(ctx, ns1, a.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns2 + "/b", Cause: v1alpha1.ReasonDuplicateSPIFFEID}}))
		Expect(conflictsOf(ctx, ns2, b.Name)(Default)).To(Equal([]v1alpha1.Conflict{{Peer: ns1 + "/a", Cause: v1alpha1.ReasonDuplicateSPIFFEID}}))
		Eventually(entryExists(ctx, ns1, a.Name)).Should(BeFalse())

		By("deleting one member lets the other recover")
		Expect(k8s.Delete(ctx, getBinding(ctx, ns2, b.Name)(Default))).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns2, Name: b.Name}, &v1alpha1.IdentityBinding{})
		}).Should(MatchError(ContainSubstring("not found")))
		Eventually(readyReason(ctx, ns1, a.Name)).Should(Equal("True"))
		Eventually(entryExists(ctx, ns1, a.Name)).Should(BeTrue())
	}, SpecTimeout(time.Minute))

	It("no conflict across service accounts or variants", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		createBinding(ctx, ns, "sa1", "one", "v1")
		createBinding(ctx, ns, "sa2", "two", "v1")
		createBinding(ctx, ns, "sa1-v2", "one", "v2")
		for _, n := range []string{"sa1", "sa2", "sa1-v2"} {
			Eventually(readyReason(ctx, ns, n)).Should(Equal("True"))
			Expect(conflictsOf(ctx, ns, n)(Default)).To(BeEmpty())
		}
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
