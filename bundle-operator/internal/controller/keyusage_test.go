package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

var _ = Describe("A CA whose key usage extension leaves out keyCertSign", func() {
	It("never replaces the good bundle (NotACA)", func(ctx context.Context) {
		g := unique("ku")
		ns := newNamespace(ctx, map[string]string{"group": g})
		good := testpki.ValidCA("ku-good").PEM()
		tb := newTrustBundle(g, inline(good))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(good)))

		bad := testpki.EmptyKeyUsageCA("empty key usage").PEM()
		updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline(bad)} })
		gen := get(ctx, tb).Generation
		// Wait for a pass over the new spec to report, either way.
		Eventually(func() int64 {
			c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "SourcesValid")
			if c == nil {
				return 0
			}
			return c.ObservedGeneration
		}).Should(BeNumerically(">=", gen))
		c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "SourcesValid")
		Expect(c.Reason).To(Equal("NotACA"), "the source is accepted: %s", c.Message)
		Consistently(func() string { return caData(ctx, ns) }, 3*time.Second).Should(Equal(pemOf(good)),
			"the target's good bundle was replaced by one whose only CA OpenSSL refuses as an issuer")
	})
})
