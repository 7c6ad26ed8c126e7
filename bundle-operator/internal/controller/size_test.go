package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// pemOfMany returns n fresh valid CAs as one PEM text.
func pemOfMany(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(testpki.ValidCA("size").PEM())
	}
	return b.String()
}

var _ = Describe("A bundle too large for Kubernetes", func() {
	It("is refused with BundleTooLarge before any write, and targets keep the last good bundle", func(ctx context.Context) {
		group := unique("big")
		ns := newNamespace(ctx, map[string]string{"group": group})
		// Each source fits in a ConfigMap; together they are over 1 MiB.
		a := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: unique("big-a"), Namespace: sourceNamespace}, Data: map[string]string{"pem": pemOfMany(1200)}}
		Expect(cp.Client.Create(ctx, a)).To(Succeed())
		small := testpki.ValidCA("small")
		b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: unique("big-b"), Namespace: sourceNamespace}, Data: map[string]string{"pem": small.PEM()}}
		Expect(cp.Client.Create(ctx, b)).To(Succeed())
		tb := newTrustBundle(group,
			v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: a.Name, Key: "pem"}},
			v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: b.Name, Key: "pem"}})
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		good := caData(ctx, ns)
		goodRV := resourceVersion(ctx, ns)

		By("the second source growing the bundle over 1 MiB")
		b.Data["pem"] = pemOfMany(1200)
		Expect(cp.Client.Update(ctx, b)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("BundleTooLarge"))
		Expect(conditionMessage(ctx, tb, "Ready")).To(ContainSubstring("over the limit of 1048576"))
		Consistently(func() string { return resourceVersion(ctx, ns) }).Should(Equal(goodRV))
		Expect(caData(ctx, ns)).To(Equal(good))
	})
})

var _ = Describe("A bundle whose status record would not fit with its PEM", func() {
	It("is published whole, and the status keeps every certificate's fingerprint without its PEM", func(ctx context.Context) {
		group := unique("fit")
		ns := newNamespace(ctx, map[string]string{"group": group})
		// Under 1 MiB of PEM, so the target fits; the status record (PEM,
		// escaped newlines, fingerprint, subject and expiry per
		// certificate) would be over 1 MiB with the PEM.
		var source strings.Builder
		var want []string
		for source.Len() < 1_000_000 {
			pemText := testpki.ValidCA("fit").PEM()
			block, _ := pem.Decode([]byte(pemText))
			Expect(block).NotTo(BeNil())
			sum := sha256.Sum256(block.Bytes)
			want = append(want, hex.EncodeToString(sum[:]))
			source.WriteString(pemText)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: unique("fit"), Namespace: sourceNamespace}, Data: map[string]string{"pem": source.String()}}
		Expect(cp.Client.Create(ctx, cm)).To(Succeed())
		tb := newTrustBundle(group, v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: cm.Name, Key: "pem"}})
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		Expect(strings.Count(caData(ctx, ns), "-----BEGIN CERTIFICATE-----")).To(Equal(len(want)))
		st := get(ctx, tb).Status
		got := make([]string, 0, len(st.Certificates))
		for _, c := range st.Certificates {
			Expect(c.PEM).To(BeEmpty(), "certificate %s kept its PEM", c.SHA256)
			got = append(got, c.SHA256)
		}
		Expect(got).To(ConsistOf(want))
	})
})
