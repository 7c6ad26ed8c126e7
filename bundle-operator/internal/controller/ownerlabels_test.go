package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/labels"
)

// Every TrustBundle of every instance writes with the same field manager,
// so neither server-side apply nor the managed fields can tell whose target
// an object is: its owner labels must (guarantee 2). A TrustBundle label
// alone, which anyone who may edit the object can set, must not.
var _ = Describe("Objects labelled as a TrustBundle's targets by another owner", func() {
	It("are never written or released: an earlier TrustBundle's leftovers, and a tenant's label", func(ctx context.Context) {
		group := unique("owners")
		selected := newNamespace(ctx, map[string]string{"group": group})
		forged := newNamespace(ctx, map[string]string{"group": group})
		elsewhere := newNamespace(ctx, nil)
		tb := newTrustBundle(group, inline(testpki.ValidCA("owners").PEM()))

		By("an earlier TrustBundle of the same name, deleted without its finalizer, left targets in a selected namespace and another")
		earlier := map[string]any{target.LabelTrustBundle: tb.Name, labels.Environment: "test",
			labels.OwnerUID: "uid-of-an-earlier-" + tb.Name, labels.OwnerKind: "TrustBundle", labels.OwnerName: tb.Name}
		const earlierBundle = "the earlier TrustBundle's bundle"
		applyConfigMap(ctx, target.FieldManager, selected, "ca", earlier, map[string]any{"ca.crt": earlierBundle}, false)
		applyConfigMap(ctx, target.FieldManager, elsewhere, "ca", earlier, map[string]any{"ca.crt": earlierBundle}, false)

		By("a tenant labelling their own ConfigMap as the TrustBundle's target")
		const tenantCA = "the tenant's own CA"
		applyConfigMap(ctx, "kubectl-client-side-apply", forged, "ca", map[string]any{target.LabelTrustBundle: tb.Name},
			map[string]any{"ca.crt": tenantCA}, false)

		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() []string { return get(ctx, tb).Status.FailedTargets }).Should(And(
			ContainElement(And(ContainSubstring("ConfigMap %s/ca", selected), ContainSubstring("another owner"))),
			ContainElement(And(ContainSubstring("ConfigMap %s/ca", forged), ContainSubstring("without its owner labels")))))
		untouched := func() []string {
			return []string{keyData(ctx, selected, "ca", "ca.crt"), keyData(ctx, elsewhere, "ca", "ca.crt"), keyData(ctx, forged, "ca", "ca.crt")}
		}
		want := []string{earlierBundle, earlierBundle, tenantCA}
		Consistently(untouched, 3*time.Second).Should(Equal(want))

		By("the TrustBundle deleted")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }).ShouldNot(Succeed())
		Consistently(untouched, 3*time.Second).Should(Equal(want))
	})
})
