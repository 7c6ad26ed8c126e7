package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// Attacks by a tenant: full rights on the namespaced objects of one
// namespace, which a TrustBundle (as usual) distributes to, and nothing
// cluster-wide. The target policy (config/rbac/target_policy.yaml) refuses
// some releases for what the tenant wrote in their own namespace (a key
// listed as the operator's, a key added under the operator's field
// manager name, a decoy labelled as a target). Such a refusal never lifts
// by itself, so it must not fail the cluster-scoped TrustBundle or hold up
// its deletion for every other namespace: the object is left in place and
// named in a Warning event, as one the API server refuses without the
// operator's keys.
var _ = Describe("A tenant's release the target policy refuses", func() {
	// tenantApply server-side applies ConfigMap ns/name as field manager
	// manager (any client may name any field manager) with labels,
	// annotations and data.
	tenantApply := func(ctx context.Context, manager, ns, name string, l, a, data map[string]any) {
		metadata := map[string]any{"name": name, "namespace": ns}
		if l != nil {
			metadata["labels"] = l
		}
		if a != nil {
			metadata["annotations"] = a
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}}
		if data != nil {
			obj.Object["data"] = data
		}
		Expect(cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(manager), client.ForceOwnership)).To(Succeed())
	}

	deleted := func(ctx context.Context, tb *v1alpha1.TrustBundle) {
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }, 20*time.Second).
			ShouldNot(Succeed(), func() string {
				return fmt.Sprintf("the TrustBundle is still held by its finalizer; Ready: %s", conditionMessage(ctx, tb, "Ready"))
			})
	}

	// decoy plants, in the tenant's namespace, a ConfigMap of another name
	// labelled as tb's target (the labels read off the target the tenant
	// was given), one key written under the operator's field manager name,
	// and a keys annotation, the tenant's, that lists that key: the
	// operator's release takes the key out, and the policy refuses a
	// write after which a listed key is gone.
	decoy := func(ctx context.Context, tenant string) {
		ours := map[string]any{}
		for k, v := range configMap(ctx, tenant, "ca").Labels {
			ours[k] = v
		}
		tenantApply(ctx, target.FieldManager, tenant, "decoy", nil, nil, map[string]any{"x": "y"})
		tenantApply(ctx, "tenant", tenant, "decoy", ours, map[string]any{target.AnnotationKeys: "x"}, map[string]any{"mine": "z"})
	}

	It("a decoy labelled as the TrustBundle's target whose release the policy refuses does not make the TrustBundle fail", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-decoy")
		decoy(ctx, tenant)
		Consistently(func() string { return readyReason(ctx, tb) }, 5*time.Second).Should(Equal("True"), func() string {
			return fmt.Sprintf("a tenant's decoy fails the cluster-scoped TrustBundle; Ready: %s", conditionMessage(ctx, tb, "Ready"))
		})
		Expect(caData(ctx, platform)).NotTo(BeEmpty())
		Eventually(func() []string { return eventNotes(ctx, tb, trustbundle.ReasonTargetsLeftInPlace) }).
			Should(ContainElement(ContainSubstring("ConfigMap "+tenant+"/decoy")), "the decoy left in place is named in a Warning event")
	})

	It("a decoy labelled as the TrustBundle's target whose release the policy refuses does not hold up its deletion", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-decoydel")
		decoy(ctx, tenant)
		deleted(ctx, tb)
		Expect(configMap(ctx, platform, "ca")).To(BeNil(), "the platform namespace's target is released")
		Expect(eventNotes(ctx, tb, trustbundle.ReasonTargetsLeftInPlace)).To(ContainElement(ContainSubstring("/decoy")),
			"the decoy left in place is named in a Warning event")
	})

	// The tenant edits only the target in their own namespace, with
	// kubectl: a key of their own beside the operator's, listed in the keys
	// annotation. The target stays in sync (the annotation is not part of
	// InSync), so nothing repairs it, and the operator's release (an empty
	// apply that drops its key and labels) leaves a listed key behind, which
	// the policy refuses.
	listOwnKey := func(ctx context.Context, tenant string) {
		Expect(cp.Client.Patch(ctx, cmRef(tenant, "ca"), mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+
			`":"ca.crt,app.conf"}},"data":{"app.conf":"tenant"}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	}

	It("a key a tenant lists in the keys annotation of the target in their namespace does not hold up the TrustBundle's deletion", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-listdel")
		listOwnKey(ctx, tenant)
		Consistently(func() string { return readyReason(ctx, tb) }, 3*time.Second).Should(Equal("True"))
		deleted(ctx, tb)
		Expect(configMap(ctx, platform, "ca")).To(BeNil(), "the platform namespace's target is released")
		Expect(keyData(ctx, tenant, "ca", "app.conf")).To(Equal("tenant"), "the tenant's key stays")
		Expect(eventNotes(ctx, tb, trustbundle.ReasonTargetsLeftInPlace)).To(ContainElement(ContainSubstring("ConfigMap "+tenant+"/ca")),
			"the target left in place is named in a Warning event")
	})

	// The tenant adds a key to the target in their namespace by an update
	// under the operator's field manager name (kubectl patch
	// --field-manager=trustplane-bundle-operator): every managedFields entry
	// then names the operator's manager, so the release takes the object
	// for the operator's alone and deletes it, and the policy refuses to
	// delete an object holding a key the operator neither listed nor
	// applied. InSync reads only the Apply entry, so nothing repairs it.
	It("a key a tenant adds to the target in their namespace under the operator's field manager name does not hold up the TrustBundle's deletion", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-fmdel")
		Expect(cp.Client.Patch(ctx, cmRef(tenant, "ca"), mergePatch(`{"data":{"app.conf":"tenant"}}`),
			client.FieldOwner(target.FieldManager))).To(Succeed())
		Consistently(func() string { return readyReason(ctx, tb) }, 3*time.Second).Should(Equal("True"))
		deleted(ctx, tb)
		Expect(configMap(ctx, platform, "ca")).To(BeNil(), "the platform namespace's target is released")
		Expect(keyData(ctx, tenant, "ca", "app.conf")).To(Equal("tenant"), "the tenant's key stays")
		Expect(caData(ctx, tenant)).To(BeEmpty(), "the operator's own key is released from the tenant's object")
	})

	It("a key a tenant lists in the keys annotation of the target in their namespace does not fail the TrustBundle once that namespace is no longer selected", func(ctx context.Context) {
		tb, platform, tenant := publishedToPlatformAndTenant(ctx, "atk-listdesel")
		listOwnKey(ctx, tenant)
		By("the platform no longer selecting the tenant's namespace")
		setNamespaceLabels(ctx, tenant, map[string]string{"group": "elsewhere"})
		Consistently(func() string { return readyReason(ctx, tb) }, 5*time.Second).Should(Equal("True"), func() string {
			return fmt.Sprintf("a namespace the TrustBundle no longer selects fails it; Ready: %s", conditionMessage(ctx, tb, "Ready"))
		})
		Expect(caData(ctx, platform)).NotTo(BeEmpty())
		Eventually(func() []string { return eventNotes(ctx, tb, trustbundle.ReasonTargetsLeftInPlace) }).
			Should(ContainElement(ContainSubstring("ConfigMap "+tenant+"/ca")), "the target left in place is named in a Warning event")
	})
})

// publishedToPlatformAndTenant creates a TrustBundle distributing to a
// platform namespace and to a tenant's, and waits for both targets and
// Ready.
func publishedToPlatformAndTenant(ctx context.Context, prefix string) (tb *v1alpha1.TrustBundle, platform, tenant string) {
	group := unique(prefix)
	platform = newNamespace(ctx, map[string]string{"group": group})
	tenant = newNamespace(ctx, map[string]string{"group": group})
	tb = newTrustBundle(group, inline(testpki.ValidCA(prefix).PEM()))
	Expect(cp.Client.Create(ctx, tb)).To(Succeed())
	for _, ns := range []string{platform, tenant} {
		Eventually(func() string { return caData(ctx, ns) }).ShouldNot(BeEmpty())
	}
	Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
	return tb, platform, tenant
}
