package controller_test

import (
	"context"
	"encoding/json"
	"strings"

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

// completeness of what a target holds, against the real API server.
var _ = Describe("a target is never written with an empty bundle", func() {
	It("refuses a TrustBundle without sources at admission", func(ctx context.Context) {
		tb := newTrustBundle(unique("nosrc"))
		tb.Spec.Sources = nil
		err := cp.Client.Create(ctx, tb)
		if err == nil {
			DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })
		}
		Expect(err).To(HaveOccurred(), "a TrustBundle without sources was admitted: the operator would publish an empty bundle")
	})

	It("does not write an empty JWKS for a TrustBundle without a spire source", func(ctx context.Context) {
		g := unique("jwks")
		ns := newNamespace(ctx, map[string]string{"group": g})
		ca := testpki.ValidCA("jwks-attack").PEM()
		tb := newTrustBundle(g, inline(ca))
		tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt", JWKS: "jwks.json"}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed(), "admission refused keys.jwks without a spire source")
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })
		// Refused as keys.spiffe is: there are no JWT authorities without
		// SPIRE, and a target never holds an empty key set.
		Eventually(func() string {
			c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "Ready")
			if c == nil {
				return ""
			}
			return c.Reason + ": " + c.Message
		}).Should(And(HavePrefix("TargetsFailed: "), ContainSubstring("the JWKS format needs a spire source")))
		Consistently(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }, "2s", "200ms").Should(BeNil(),
			"a target naming keys.jwks was written without a spire source")
	})
})

// the frozen-target fix of the last-good fill, reached without
// immutable. A tenant adds a key of their own to the target in their
// selected namespace so that the next, larger bundle does not fit in the
// 1 MiB a ConfigMap holds. The bundle change fails there (the target keeps
// the old hash under our Apply entry); when a source then fails, the
// dry-run probe of the last good bundle is refused for the size of the
// whole object. A namespace selected during the failure must still get the
// last good bundle.
var _ = Describe("a tenant inflates its own target before a source fails", func() {
	It("does not stop a new namespace from getting the last good bundle", func(ctx context.Context) {
		g := unique("inflate")
		tenant := newNamespace(ctx, map[string]string{"group": g})
		caA := testpki.ValidCA("inflate-a").PEM()
		tb := newTrustBundle(g, inline(caA))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })
		Eventually(func() string { return caData(ctx, tenant) }).Should(Equal(pemOf(caA)))

		By("the tenant adding a key that leaves a few hundred bytes free")
		pad := (1 << 20) - len("ca.crt") - len(pemOf(caA)) - len("pad") - 300
		patch, err := json.Marshal(map[string]any{"data": map[string]string{"pad": strings.Repeat("x", pad)}})
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "ca"}}
		Expect(cp.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("kubectl-patch"))).To(Succeed())

		By("the bundle growing (published; the tenant's target no longer fits)")
		more := []string{caA}
		for range 4 {
			more = append(more, testpki.ValidCA("inflate-more").PEM())
		}
		updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline(more...)} })
		certs, err := bundle.ParsePEM([]byte(strings.Join(more, "")))
		Expect(err).NotTo(HaveOccurred())
		fpB := bundle.New(certs, nil).Fingerprint()
		Eventually(func() string { return get(ctx, tb).Status.Fingerprint }).Should(Equal(fpB))
		Eventually(func() int32 { return get(ctx, tb).Status.TargetsFailed }).Should(Equal(int32(1)))
		Expect(caData(ctx, tenant)).To(Equal(pemOf(caA)))

		By("the source failing")
		failSource(ctx, tb)

		By("a new namespace being selected during the failure")
		fresh := newNamespace(ctx, map[string]string{"group": g})
		Eventually(func() string { return caData(ctx, fresh) }).Should(Equal(pemOf(more...)), func() string {
			c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "SourcesValid")
			return "the new namespace got no target; SourcesValid: " + c.Message
		})
	})
})
