package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
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

var _ = Describe("A ClusterTrustBundle another writer created", func() {
	// The operator runs under its target policy (config/rbac), which lets
	// it take over no content it did not write, even the same bundle: a
	// shared key would be one it could change later.
	It("is left as its writer made it while it holds the same bundle, the failure named, until the target moves away", func(ctx context.Context) {
		ca := testpki.ValidCA("ctb-theirs")
		theirs := unique("trustplane-ctb-theirs")
		Expect(cp.Client.Create(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: theirs},
			Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: pemOf(ca.PEM())}}, client.FieldOwner("another-writer"))).To(Succeed())
		tb := newTrustBundle(unique("ctb-theirs"), inline(ca.PEM()))
		tb.Spec.Target = v1alpha1.Target{ClusterTrustBundle: &v1alpha1.ClusterTrustBundleTarget{Name: theirs}}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return conditionMessage(ctx, tb, "Ready") }).Should(
			And(ContainSubstring("ClusterTrustBundle "+theirs), ContainSubstring("only TrustBundle targets")))
		ctb := &certificatesv1.ClusterTrustBundle{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: theirs}, ctb)).To(Succeed())
		Expect(ctb.Labels).NotTo(HaveKey(target.LabelTrustBundle))
		Expect(ctb.Spec.TrustBundle).To(Equal(pemOf(ca.PEM())))

		By("renaming the target away from it")
		ours := unique("trustplane-ctb-ours")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Target.ClusterTrustBundle.Name = ours })
		Eventually(func() string { return clusterTrustBundle(ctx, ours) }).Should(Equal(pemOf(ca.PEM())))
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: theirs}, ctb)).To(Succeed(), "the other writer's ClusterTrustBundle is still there")
		Expect(ctb.Spec.TrustBundle).To(Equal(pemOf(ca.PEM())))
		Expect(ctb.Labels).NotTo(HaveKey(target.LabelTrustBundle))
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Expect(cp.Client.Delete(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: theirs}})).To(Succeed())
	})
})

var _ = Describe("A ClusterTrustBundle target while the sources fail", func() {
	It("is created again with the last good bundle when deleted", func(ctx context.Context) {
		good := testpki.ValidCA("ctb-lastgood")
		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: unique("ctb-src"), Namespace: sourceNamespace}, Data: map[string]string{"pem": good.PEM()}}
		Expect(cp.Client.Create(ctx, src)).To(Succeed())
		name := unique("trustplane-ctb-lastgood")
		tb := newTrustBundle(unique("ctb-lastgood"), v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: src.Name, Key: "pem"}})
		tb.Spec.Target = v1alpha1.Target{ClusterTrustBundle: &v1alpha1.ClusterTrustBundleTarget{Name: name}}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		want := pemOf(good.PEM())
		Eventually(func() string { return clusterTrustBundle(ctx, name) }).Should(Equal(want))

		By("breaking the source")
		src.Data["pem"] = "not a certificate\n" + good.PEM()
		Expect(cp.Client.Update(ctx, src)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonUnparseable))

		By("deleting the ClusterTrustBundle by hand")
		Expect(cp.Client.Delete(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		Eventually(func() string { return clusterTrustBundle(ctx, name) }).Should(Equal(want))
		ctb := &certificatesv1.ClusterTrustBundle{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, ctb)).To(Succeed())
		Expect(ctb.Labels).To(HaveKeyWithValue(target.LabelTrustBundle, tb.Name))
	})
})
