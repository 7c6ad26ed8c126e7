package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// clusterTrustBundle returns spec.trustBundle of the ClusterTrustBundle
// name, or "<absent>".
func clusterTrustBundle(ctx context.Context, name string) string {
	ctb := &certificatesv1.ClusterTrustBundle{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, ctb); err != nil {
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		return "<absent>"
	}
	return ctb.Spec.TrustBundle
}

var _ = Describe("A ClusterTrustBundle target", func() {
	It("holds the PEM bundle, is repaired after a hand edit, and is released when renamed or the TrustBundle is deleted", func(ctx context.Context) {
		ca := testpki.ValidCA("ctb")
		tb := newTrustBundle(unique("ctb"), inline(ca.PEM()))
		first := unique("trustplane-ctb")
		tb.Spec.Target = v1alpha1.Target{ClusterTrustBundle: &v1alpha1.ClusterTrustBundleTarget{Name: first}}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return clusterTrustBundle(ctx, first) }).Should(Equal(pemOf(ca.PEM())))
		ctb := &certificatesv1.ClusterTrustBundle{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: first}, ctb)).To(Succeed())
		Expect(ctb.Labels).To(HaveKeyWithValue(target.LabelTrustBundle, tb.Name))
		Expect(ctb.Spec.SignerName).To(BeEmpty())

		By("a hand edit of spec.trustBundle")
		Eventually(func() error {
			cur := &certificatesv1.ClusterTrustBundle{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: first}, cur); err != nil {
				return err
			}
			cur.Spec.TrustBundle = testpki.ValidCA("intruder").PEM()
			return cp.Client.Update(ctx, cur, client.FieldOwner("hand-edit"))
		}).Should(Succeed())
		Eventually(func() string { return clusterTrustBundle(ctx, first) }).Should(Equal(pemOf(ca.PEM())))

		By("renaming the target")
		second := unique("trustplane-ctb")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Target.ClusterTrustBundle.Name = second })
		Eventually(func() string { return clusterTrustBundle(ctx, second) }).Should(Equal(pemOf(ca.PEM())))
		Eventually(func() string { return clusterTrustBundle(ctx, first) }).Should(Equal("<absent>"))

		By("deleting the TrustBundle")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() string { return clusterTrustBundle(ctx, second) }).Should(Equal("<absent>"))
	})
})
