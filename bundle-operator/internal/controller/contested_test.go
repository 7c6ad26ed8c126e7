package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// Every TrustBundle writes with the same field manager, so server-side
// apply alone sees no conflict between two of them: the label naming the
// TrustBundle decides whose target an object is.
var _ = Describe("A target name held by another TrustBundle", func() {
	It("is left to the first: the second reports it and never overwrites or deletes it", func(ctx context.Context) {
		group := unique("contest")
		ns := newNamespace(ctx, map[string]string{"group": group})
		first := newTrustBundle(group, inline(testpki.ValidCA("first").PEM()))
		Expect(cp.Client.Create(ctx, first)).To(Succeed())
		want := pemOf(first.Spec.Sources[0].Inline)
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(want))

		second := newTrustBundle(group, inline(testpki.ValidCA("second").PEM()))
		Expect(cp.Client.Create(ctx, second)).To(Succeed())
		Eventually(func() []string { return get(ctx, second).Status.FailedTargets }).Should(
			ContainElement(And(ContainSubstring("ConfigMap %s/ca", ns), ContainSubstring(first.Name))))
		Consistently(func() string { return caData(ctx, ns) }).Should(Equal(want))
		Expect(configMap(ctx, ns, "ca").Labels).To(HaveKeyWithValue(target.LabelTrustBundle, first.Name))

		By("the second TrustBundle deleted")
		Expect(cp.Client.Delete(ctx, second)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(second), &v1alpha1.TrustBundle{}) }).ShouldNot(Succeed())
		Consistently(func() string { return caData(ctx, ns) }).Should(Equal(want))
	})

	It("as a ClusterTrustBundle is left to the first as well", func(ctx context.Context) {
		name := unique("trustplane-contest")
		first := newTrustBundle(unique("ctb-contest"), inline(testpki.ValidCA("first").PEM()))
		first.Spec.Target = v1alpha1.Target{ClusterTrustBundle: &v1alpha1.ClusterTrustBundleTarget{Name: name}}
		Expect(cp.Client.Create(ctx, first)).To(Succeed())
		want := pemOf(first.Spec.Sources[0].Inline)
		Eventually(func() string { return clusterTrustBundle(ctx, name) }).Should(Equal(want))

		second := newTrustBundle(unique("ctb-contest"), inline(testpki.ValidCA("second").PEM()))
		second.Spec.Target = first.Spec.Target
		Expect(cp.Client.Create(ctx, second)).To(Succeed())
		Eventually(func() []string { return get(ctx, second).Status.FailedTargets }).Should(
			ContainElement(And(ContainSubstring("ClusterTrustBundle %s", name), ContainSubstring(first.Name))))
		Consistently(func() string { return clusterTrustBundle(ctx, name) }).Should(Equal(want))

		By("the second TrustBundle deleted")
		Expect(cp.Client.Delete(ctx, second)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(second), &v1alpha1.TrustBundle{}) }).ShouldNot(Succeed())
		Consistently(func() string { return clusterTrustBundle(ctx, name) }).Should(Equal(want))
	})
})

// laggingCache is a target cache that has not seen any target yet: every
// read finds nothing, as a cache does in the moment after another
// TrustBundle's create reached the API server.
type laggingCache struct{ client.Reader }

func (laggingCache) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
}

func (laggingCache) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

var _ = Describe("A target name another TrustBundle took while the cache lagged", func() {
	It("is left to the first: the second reports it once the API server shows whose it is", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		objects := &target.Objects{Cache: laggingCache{cp.Client}, Client: cp.Client, Live: cp.Client}
		desired := func(bundle, pem string) target.Desired {
			return target.Desired{Bundle: bundle, Kind: target.KindConfigMap, Name: "ca", Namespaces: []string{ns},
				Data: map[string][]byte{"ca.crt": []byte(pem)}, Labels: map[string]string{target.LabelTrustBundle: bundle}}
		}
		first := objects.Sync(ctx, desired("first", "the first bundle"))
		Expect(first.Failed).To(BeEmpty())
		Expect(configMap(ctx, ns, "ca").Data).To(HaveKeyWithValue("ca.crt", "the first bundle"))

		second := objects.Sync(ctx, desired("second", "the second bundle"))
		Expect(second.Failed).To(ContainElement(And(ContainSubstring("ConfigMap %s/ca", ns), ContainSubstring(`TrustBundle "first"`))))
		cm := configMap(ctx, ns, "ca")
		Expect(cm.Data).To(Equal(map[string]string{"ca.crt": "the first bundle"}))
		Expect(cm.Labels).To(HaveKeyWithValue(target.LabelTrustBundle, "first"))

		By("the first, whose target the cache also misses, still writes it")
		again := objects.Sync(ctx, desired("first", "the first bundle, updated"))
		Expect(again.Failed).To(BeEmpty())
		Expect(configMap(ctx, ns, "ca").Data).To(Equal(map[string]string{"ca.crt": "the first bundle, updated"}))
	})
})

var _ = Describe("A ClusterTrustBundle another TrustBundle took while the cache lagged", func() {
	It("is left to the first: the second reports it once the API server shows whose it is", func(ctx context.Context) {
		name := unique("lagging-ctb")
		ctbs := &target.ClusterTrustBundles{Cache: laggingCache{cp.Client}, Client: cp.Client, Live: cp.Client}
		labelsOf := func(bundle string) map[string]string { return map[string]string{target.LabelTrustBundle: bundle} }
		firstPEM, secondPEM, updatedPEM := testpki.ValidCA("first").PEM(), testpki.ValidCA("second").PEM(), testpki.ValidCA("updated").PEM()

		Expect(ctbs.Sync(ctx, name, []byte(firstPEM), labelsOf("first")).Failed).To(BeEmpty())
		Expect(clusterTrustBundle(ctx, name)).To(Equal(firstPEM))

		second := ctbs.Sync(ctx, name, []byte(secondPEM), labelsOf("second"))
		Expect(second.Failed).To(ContainElement(And(ContainSubstring("ClusterTrustBundle %s", name), ContainSubstring(`TrustBundle "first"`))))
		Expect(clusterTrustBundle(ctx, name)).To(Equal(firstPEM))

		By("the first, whose target the cache also misses, still writes it")
		Expect(ctbs.Sync(ctx, name, []byte(updatedPEM), labelsOf("first")).Failed).To(BeEmpty())
		Expect(clusterTrustBundle(ctx, name)).To(Equal(updatedPEM))
	})
})
