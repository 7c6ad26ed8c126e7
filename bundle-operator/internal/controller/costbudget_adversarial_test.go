package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// The target policy (config/rbac/target_policy.yaml) evaluated
// `k in variables.claimedBefore` (a list split from the keys annotation)
// for every data key of the object, inside a filter over all of them. A
// tenant who may edit ConfigMaps in one namespace controls both sizes: a
// few hundred keys of their own and a keys annotation of 100,000 entries
// (200 KB, well under the 256 KiB annotation limit). Any write of the
// operator to that object then costs the policy's CEL evaluation more than
// the API server's runtime budget, the policy "cannot judge", and the API
// server refuses the write with reason Invalid (no field), which the
// operator takes neither as a field refusal nor as its own policy's
// judgement: the release stayed a plain failure, retried for ever (all
// three specs seen failing). The policy now refuses an object of more than
// 256 keys or a keys annotation over 2048 characters at once, as Forbidden,
// and a target the policy refuses no longer stops the fill of new targets.
//
// docs/bundle-operator.md: "A target that cannot be released is left in
// place, and holds nothing up." / "it is not a failed target, so the
// TrustBundle stays Ready and its deletion goes through".
var _ = Describe("A tenant object too large for the target policy's cost budget", func() {
	const tenantKeys = 2000
	hugeList := strings.Repeat(",a", 100000)
	tenantData := func() map[string]any {
		d := map[string]any{}
		for i := 0; i < tenantKeys; i++ {
			d[fmt.Sprintf("t%05d", i)] = "v"
		}
		return d
	}

	It("does not hold up the TrustBundle's deletion when the tenant edits the target of their own namespace", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-cost-del")
		// kubectl edit of the tenant's own target: keys of their own, and
		// a long keys annotation (the tenant's value, listing ca.crt too).
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{target.AnnotationKeys: "ca.crt" + hugeList}},
			"data":     tenantData(),
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(cp.Client.Patch(ctx, cmRef(tenant, "ca"), mergePatch(string(body)), client.FieldOwner("kubectl-edit"))).To(Succeed())
		Consistently(func() string { return readyReason(ctx, tb) }, 3*time.Second).Should(Equal("True"))

		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }, 20*time.Second).
			ShouldNot(Succeed(), func() string {
				return fmt.Sprintf("the TrustBundle is still held by its finalizer; Ready: %s", conditionMessage(ctx, tb, "Ready"))
			})
		Expect(configMap(ctx, platform, "ca")).To(BeNil(), "the platform namespace's target is released")
	})

	It("does not make the TrustBundle fail through a decoy in the tenant's namespace", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-cost-decoy")
		ours := map[string]any{}
		for k, v := range configMap(ctx, tenant, "ca").Labels {
			ours[k] = v
		}
		apply := func(manager string, l, a, data map[string]any) {
			metadata := map[string]any{"name": "decoy", "namespace": tenant}
			if l != nil {
				metadata["labels"] = l
			}
			if a != nil {
				metadata["annotations"] = a
			}
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}}
			Expect(cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(manager), client.ForceOwnership)).To(Succeed())
		}
		apply(target.FieldManager, nil, nil, map[string]any{"x": "y"})
		apply("tenant", ours, map[string]any{target.AnnotationKeys: "x" + hugeList}, tenantData())

		Consistently(func() string { return readyReason(ctx, tb) }, 5*time.Second).Should(Equal("True"), func() string {
			return fmt.Sprintf("a tenant's decoy fails the cluster-scoped TrustBundle; Ready: %s", conditionMessage(ctx, tb, "Ready"))
		})
		Expect(caData(ctx, platform)).NotTo(BeEmpty())
	})

	// The same edit before a bundle change: the operator's forced write of
	// the new bundle to the tenant's target is refused for the budget, so
	// that target keeps the old bundle under the operator's own hash
	// annotation. While the source later fails, the last-good fill probes
	// it with a dry run, which the budget refuses too, and no namespace
	// selected meanwhile gets the last good bundle.
	// docs/bundle-operator.md: "neither a tenant's ConfigMap of the
	// target's name ... nor an edit of the annotation on the target of
	// their own selected namespace, can stop the other selected namespaces
	// from getting the last good bundle".
	It("does not keep a namespace selected during a source failure from getting the last good bundle", func(ctx context.Context) {
		group := unique("atk-cost-fill")
		tenant := newNamespace(ctx, map[string]string{"group": group})
		ca1, ca2 := testpki.ValidCA("atk-cost-fill-1"), testpki.ValidCA("atk-cost-fill-2")
		tb := newTrustBundle(group, inline(ca1.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, tenant) }).Should(Equal(pemOf(ca1.PEM())))
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{target.AnnotationKeys: "ca.crt" + hugeList}},
			"data":     tenantData(),
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(cp.Client.Patch(ctx, cmRef(tenant, "ca"), mergePatch(string(body)), client.FieldOwner("kubectl-edit"))).To(Succeed())

		By("a bundle change the tenant's target does not take")
		updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline(ca1.PEM(), ca2.PEM())} })
		Eventually(func() int32 { return get(ctx, tb).Status.CACount }).Should(BeEquivalentTo(2))
		Expect(caData(ctx, tenant)).To(Equal(pemOf(ca1.PEM())))

		By("the source failing, and a namespace selected meanwhile")
		updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline("not a PEM bundle\n")} })
		Eventually(func() string { return readyReason(ctx, tb) }).ShouldNot(Or(Equal("True"), Equal("TargetsFailed")))
		newcomer := newNamespace(ctx, map[string]string{"group": group})
		Eventually(func() string { return caData(ctx, newcomer) }, 15*time.Second).Should(Equal(pemOf(ca1.PEM(), ca2.PEM())), func() string {
			return fmt.Sprintf("the newcomer got no last good bundle; Ready: %s", conditionMessage(ctx, tb, "Ready"))
		})
	})
})
