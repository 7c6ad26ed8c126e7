package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

var _ = Describe("A namespace that starts matching while a source fails", func() {
	It("gets the last good bundle whatever a tenant writes on the target of their own selected namespace", func(ctx context.Context) {
		group := unique("tenanthash")
		tenant := newNamespace(ctx, map[string]string{"group": group})
		good := testpki.ValidCA("tenanthash")
		tb := newTrustBundle(group, inline(good.PEM()), inline(good.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, tenant) }).Should(Equal(pemOf(good.PEM())))
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		By("a source turning bad")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Sources[1].Inline = good.PEM() + good.KeyPEM() })
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonPrivateKey))

		By("the tenant editing the hash annotation of the target in their namespace (kubectl annotate --overwrite)")
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = tenant, "ca"
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"chosen-by-the-tenant"}}}`, target.AnnotationHash)
		Expect(cp.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("kubectl-annotate"))).To(Succeed())

		By("a new namespace joining the selected group")
		newcomer := newNamespace(ctx, map[string]string{"group": group})
		Eventually(func() string { return caData(ctx, newcomer) }, 15*time.Second).Should(Equal(pemOf(good.PEM())), func() string {
			return fmt.Sprintf("Ready: %s", conditionMessage(ctx, tb, "Ready"))
		})
	})
})
