package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// A tenant with rights only in their own selected namespace freezes the
// operator's target there (immutable: true, a plain kubectl patch, no
// forged field manager). The next bundle cannot be written there, so that
// target keeps the old hash annotation, still owned by our Apply entry.
// When a source then fails, the last-good guard must not count it as an
// existing target holding another bundle: a namespace selected during the
// failure still gets the last good bundle (before, it got nothing).
var _ = Describe("A tenant freezes its own target before a source fails", func() {
	It("does not stop a new namespace from getting the last good bundle", func(ctx context.Context) {
		g := unique("freeze")
		tenant := newNamespace(ctx, map[string]string{"group": g})
		caA := testpki.ValidCA("freeze-a").PEM()
		caB := testpki.ValidCA("freeze-b").PEM()
		tb := newTrustBundle(g, inline(caA))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })
		Eventually(func() string { return caData(ctx, tenant) }).Should(Equal(pemOf(caA)))

		By("the tenant marking the target in their namespace immutable")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "ca"}}
		Expect(cp.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"immutable":true}`)),
			client.FieldOwner("kubectl-patch"))).To(Succeed())

		By("the bundle changing (published; the tenant's frozen target fails)")
		updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline(caB)} })
		certs, err := bundle.ParsePEM([]byte(caB))
		Expect(err).NotTo(HaveOccurred())
		fpB := bundle.New(certs, nil).Fingerprint()
		Eventually(func() string { return get(ctx, tb).Status.Fingerprint }).Should(Equal(fpB))
		By("the frozen target being reported as failed: it does not hold the current bundle")
		Eventually(func() int32 { return get(ctx, tb).Status.TargetsFailed }).Should(Equal(int32(1)))
		Expect(caData(ctx, tenant)).To(Equal(pemOf(caA)))

		By("the source failing")
		failSource(ctx, tb)

		By("a new namespace being selected during the failure")
		fresh := newNamespace(ctx, map[string]string{"group": g})
		Eventually(func() string { return caData(ctx, fresh) }).Should(Equal(pemOf(caB)), func() string {
			c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "SourcesValid")
			return "the new namespace got no target; SourcesValid: " + c.Message
		})
	})
})

// failSource makes tb's only source unparseable and waits for the
// SourcesValid condition to say so.
func failSource(ctx context.Context, tb *v1alpha1.TrustBundle) {
	GinkgoHelper()
	updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline("not a certificate\n")} })
	Eventually(func() string {
		c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "SourcesValid")
		if c == nil {
			return ""
		}
		return c.Reason
	}).Should(Equal(bundle.ReasonUnparseable))
}
