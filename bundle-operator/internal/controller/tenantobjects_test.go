package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/labels"
)

// applyConfigMap server-side applies ConfigMap ns/name with the given
// labels, data and immutability as field manager manager.
func applyConfigMap(ctx context.Context, manager, ns, name string, labels map[string]any, data map[string]any, immutable bool) {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns}}}
	if labels != nil {
		obj.Object["metadata"].(map[string]any)["labels"] = labels
	}
	if data != nil {
		obj.Object["data"] = data
	}
	if immutable {
		obj.Object["immutable"] = true
	}
	Expect(cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(manager), client.ForceOwnership)).To(Succeed())
}

var _ = Describe("A tenant's ConfigMaps cannot hold up a TrustBundle", func() {
	It("is deleted although a tenant made its target in their namespace immutable", func(ctx context.Context) {
		group := unique("imm")
		tenant := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, inline(testpki.ValidCA("imm").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, tenant) }).ShouldNot(BeEmpty())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		By("the tenant marking the operator's target in their namespace immutable (kubectl patch)")
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = tenant, "ca"
		Expect(cp.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"immutable":true}`)), client.FieldOwner("kubectl-patch"))).To(Succeed())

		By("an administrator deleting the cluster-scoped TrustBundle")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }, 20*time.Second).
			ShouldNot(Succeed(), func() string {
				return fmt.Sprintf("the TrustBundle is still held by its finalizer; Ready: %s", conditionMessage(ctx, tb, "Ready"))
			})
		Expect(eventNotes(ctx, tb, trustbundle.ReasonTargetsLeftInPlace)).To(ContainElement(ContainSubstring("ConfigMap "+tenant+"/ca")),
			"the target left in place is named in a Warning event")
		Expect(caData(ctx, tenant)).NotTo(BeEmpty(), "the immutable target is left as it is")
	})

	// decoyOutsideTheSelector creates a TrustBundle selecting a fresh group and,
	// in a tenant's namespace outside that group, an immutable ConfigMap
	// labelled as the TrustBundle's target (every label of one), one key of it written under the
	// operator's field manager name: all ordinary API calls for whoever may
	// write ConfigMaps in that namespace.
	decoyOutsideTheSelector := func(ctx context.Context, prefix string) *v1alpha1.TrustBundle {
		group := unique(prefix)
		selected := newNamespace(ctx, map[string]string{"group": group})
		tenant := newNamespace(ctx, map[string]string{"group": "tenant-only"})
		tb := newTrustBundle(group, inline(testpki.ValidCA(prefix).PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, selected) }).ShouldNot(BeEmpty())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		applyConfigMap(ctx, target.FieldManager, tenant, "decoy", nil, map[string]any{"x": "y"}, false)
		// Every label a target of tb carries, copied from the TrustBundle
		// (anyone who may read it sees its UID): the decoy is tb's target
		// as far as any label tells.
		ours := map[string]any{target.LabelTrustBundle: tb.Name, labels.Environment: "test",
			labels.OwnerUID: string(tb.UID), labels.OwnerKind: "TrustBundle", labels.OwnerName: tb.Name}
		applyConfigMap(ctx, "tenant", tenant, "decoy", ours, map[string]any{"mine": "z"}, true)
		return tb
	}

	It("stays Ready although a tenant labels an immutable ConfigMap of a namespace it never selected as its target", func(ctx context.Context) {
		tb := decoyOutsideTheSelector(ctx, "lbl")
		Consistently(func() string { return readyReason(ctx, tb) }, 5*time.Second).Should(Equal("True"), func() string {
			return fmt.Sprintf("Ready: %s", conditionMessage(ctx, tb, "Ready"))
		})
		Expect(eventNotes(ctx, tb, trustbundle.ReasonTargetsLeftInPlace)).To(ContainElement(ContainSubstring("/decoy")),
			"the decoy that cannot be released is named in a Warning event")
	})

	It("is deleted although a tenant labels an immutable ConfigMap of a namespace it never selected as its target", func(ctx context.Context) {
		tb := decoyOutsideTheSelector(ctx, "lbldel")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }, 20*time.Second).
			ShouldNot(Succeed(), func() string {
				return fmt.Sprintf("the TrustBundle is still held by its finalizer; Ready: %s", conditionMessage(ctx, tb, "Ready"))
			})
	})
})

var _ = Describe("A target deleted while a source fails", func() {
	DescribeTable("is created again with the last good bundle, whatever a tenant labels in a namespace the TrustBundle does not select",
		func(ctx context.Context, decoy bool) {
			group := unique("refill")
			selected := newNamespace(ctx, map[string]string{"group": group})
			tenant := newNamespace(ctx, map[string]string{"group": "tenant-only"})
			good := testpki.ValidCA("refill")
			tb := newTrustBundle(group, inline(good.PEM()), inline(good.PEM()))
			Expect(cp.Client.Create(ctx, tb)).To(Succeed())
			Eventually(func() string { return caData(ctx, selected) }).Should(Equal(pemOf(good.PEM())))
			Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

			if decoy {
				By("the tenant labelling a ConfigMap of the target's name in their own namespace as the TrustBundle's, with a hash of their choosing")
				Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "ca",
						Labels:      map[string]string{target.LabelTrustBundle: tb.Name},
						Annotations: map[string]string{target.AnnotationHash: "chosen-by-the-tenant"}},
					Data: map[string]string{"ca.crt": "anything"},
				}, client.FieldOwner("tenant"))).To(Succeed())
				Consistently(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
			}

			By("a source turning bad")
			updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Sources[1].Inline = good.PEM() + good.KeyPEM() })
			Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonPrivateKey))

			By("the only target being deleted by hand during the failure")
			Expect(cp.Client.Delete(ctx, configMap(ctx, selected, "ca"))).To(Succeed())
			Eventually(func() string { return caData(ctx, selected) }, 15*time.Second).Should(Equal(pemOf(good.PEM())), func() string {
				return fmt.Sprintf("Ready: %s", conditionMessage(ctx, tb, "Ready"))
			})
		},
		Entry("without any object of the tenant", false),
		Entry("with a ConfigMap the tenant labelled in their own namespace", true),
	)
})
