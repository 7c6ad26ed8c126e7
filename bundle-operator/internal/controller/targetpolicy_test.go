package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/labels"
)

// RBAC cannot narrow bundle-operator's create, patch and delete of
// ConfigMaps (and Secrets) to its own targets, since a TrustBundle may name
// any namespace, so its service account token could rewrite any ConfigMap
// of the cluster. The policy in config/rbac holds the account to what
// distribution does.
var _ = Describe("The target policy: bundle-operator's service account changes only its own keys of ConfigMaps and Secrets", Ordered, func() {
	var asOperator client.Client

	BeforeAll(func(ctx context.Context) {
		var cfg *rest.Config
		cfg, asOperator = operatorUnderPolicies(ctx)
		By("the operator runs as its service account under the policies")
		runManagerAs(cfg, spireSrv.SocketPath)
	})

	It("admits the operator's distribution: new targets, a key beside a tenant's, a rotation and the release", func(ctx context.Context) {
		group := unique("target-policy")
		own := newNamespace(ctx, map[string]string{"group": group})
		shared := newNamespace(ctx, map[string]string{"group": group})
		applyConfigMap(ctx, "tenant", shared, "ca", map[string]any{"app": "web"}, map[string]any{"app.conf": "x"}, false)

		first, second := testpki.ValidCA("target-policy-1"), testpki.ValidCA("target-policy-2")
		tb := newTrustBundle(group, inline(first.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		for _, ns := range []string{own, shared} {
			Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(first.PEM())), ns)
		}
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		By("a rotation rewrites the operator's key")
		updateSpec(ctx, tb, func(tb *v1alpha1.TrustBundle) { tb.Spec.Sources = []v1alpha1.Source{inline(second.PEM())} })
		for _, ns := range []string{own, shared} {
			Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(second.PEM())), ns)
		}

		By("the release deletes the operator's own target and takes its key out of the tenant's")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() *corev1.ConfigMap { return configMap(ctx, own, "ca") }).Should(BeNil())
		Eventually(func() map[string]string { return configMap(ctx, shared, "ca").Data }).Should(Equal(map[string]string{"app.conf": "x"}))
		Expect(configMap(ctx, shared, "ca").Labels).To(Equal(map[string]string{"app": "web"}))
	})

	It("refuses, from the operator's service account, any other change of a ConfigMap or Secret", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		victim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns",
			Labels: map[string]string{"app": "dns"}, Annotations: map[string]string{"note": "kept"}},
			Data: map[string]string{"Corefile": "forward . 10.0.0.10"}}
		Expect(cp.Client.Create(ctx, victim)).To(Succeed())
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Data: map[string][]byte{"password": []byte("s3cret")}}
		Expect(cp.Client.Create(ctx, secret)).To(Succeed())
		cm := func() *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
		}

		var admitted []string
		for what, c := range map[string]struct {
			obj   client.Object
			patch client.Patch
			want  string
		}{
			"a key's value": {cm(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"Corefile":"forward . 6.6.6.6"}}`)), "only the keys it wrote"},
			"a key removed": {cm(), jsonPatch(`[{"op":"remove","path":"/data/Corefile"}]`), "only the keys it wrote"},
			"ownership of a key planted in managedFields": {cm(), jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":` +
				`{"manager":"` + target.FieldManager + `","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:Corefile":{}}}}}]`),
				"takes over no key"},
			"a key listed as its own": {cm(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":"Corefile"}}}`)),
				"takes over no key"},
			"a label":            {cm(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"other"}}}`)), "changes no label or annotation but its own"},
			"an annotation":      {cm(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":null}}}`)), "changes no label or annotation but its own"},
			"a finalizer":        {cm(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)), "changes no label or annotation but its own"},
			"immutable":          {cm(), client.RawPatch(types.MergePatchType, []byte(`{"immutable":true}`)), "changes no label or annotation but its own"},
			"an owner reference": {cm(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"x","uid":"3f1c0e7a-0000-4000-8000-000000000009"}]}}`)), "changes no label or annotation but its own"},
			"a Secret's key": {&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}},
				client.RawPatch(types.MergePatchType, []byte(`{"data":{"password":"b3duZWQ="}}`)), "only the keys it wrote"},
		} {
			// Every case is tried, so that a failure names each that went through.
			if err := asOperator.Patch(ctx, c.obj, c.patch); err == nil || !strings.Contains(err.Error(), c.want) {
				admitted = append(admitted, fmt.Sprintf("%s: %v", what, err))
			}
		}
		Expect(admitted).To(BeEmpty(), "want each refused with its reason")

		By("nor may its field manager take over an existing key by applying the same value")
		Expect(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "coredns"},
			"data": map[string]any{"Corefile": "forward . 10.0.0.10"}}}), client.FieldOwner(target.FieldManager))).
			To(MatchError(ContainSubstring("takes over no key")))

		By("a key of its own added beside the tenant's, with the labels of a target, gives it no more")
		Expect(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "coredns",
				"labels": map[string]any{target.LabelTrustBundle: "tb", labels.OwnerUID: "3f1c0e7a-0000-4000-8000-00000000000a"}},
			"data": map[string]any{"ca.crt": "x"}}}), client.FieldOwner(target.FieldManager))).To(Succeed())
		Expect(asOperator.Patch(ctx, cm(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"Corefile":"forward . 6.6.6.6"}}`)))).
			To(MatchError(ContainSubstring("only the keys it wrote")))
		Expect(asOperator.Delete(ctx, cm())).To(MatchError(ContainSubstring("deletes only objects that are all its own")))
		Expect(asOperator.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}})).
			To(MatchError(ContainSubstring("deletes only objects that are all its own")))

		By("nor may it create a ConfigMap or Secret that is not a target")
		Expect(asOperator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "identity-boundary-admission"},
			Data: map[string]string{"allowed": "system:serviceaccount:rbac-operator:bundle-operator"}})).
			To(MatchError(ContainSubstring("creates only TrustBundle targets")))
		Expect(asOperator.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planted"}})).
			To(MatchError(ContainSubstring("creates only TrustBundle targets")))

		By("nor rewrite or delete a ClusterTrustBundle that is not its own")
		foreign := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: unique("other-ctb")},
			Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: testpki.ValidCA("other-ctb").PEM()}}
		Expect(cp.Client.Create(ctx, foreign)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(cp.Client.Delete(ctx, foreign)).To(Succeed()) })
		intruder, err := json.Marshal(map[string]any{"spec": map[string]any{"trustBundle": testpki.ValidCA("intruder-ctb").PEM()}})
		Expect(err).NotTo(HaveOccurred())
		Expect(asOperator.Patch(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: foreign.Name}},
			client.RawPatch(types.MergePatchType, intruder))).To(MatchError(ContainSubstring("only the keys it wrote")))
		Expect(asOperator.Delete(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: foreign.Name}})).
			To(MatchError(ContainSubstring("deletes only objects that are all its own")))
		Expect(clusterTrustBundle(ctx, foreign.Name)).To(Equal(foreign.Spec.TrustBundle))

		By("the tenant's ConfigMap and Secret are as they were, but for the key the operator added")
		kept := configMap(ctx, ns, "coredns")
		Expect(kept.Data).To(Equal(map[string]string{"Corefile": "forward . 10.0.0.10", "ca.crt": "x"}))
		Expect(kept.Labels).To(HaveKeyWithValue("app", "dns"))
		Expect(kept.Annotations).To(HaveKeyWithValue("note", "kept"))
		Expect(kept.Finalizers).To(BeEmpty())
		Expect(kept.OwnerReferences).To(BeEmpty())
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		Expect(secret.Data).To(Equal(map[string][]byte{"password": []byte("s3cret")}))
	})
})

// operatorUnderPolicies creates the operator's service account with its
// RBAC (operatorIdentity) and the admission policies config/rbac puts beside
// its ClusterRole (injection and targets), unchanged, and returns the
// account's configuration and a client of it once the API server enforces
// both on it.
func operatorUnderPolicies(ctx context.Context) (*rest.Config, client.Client) {
	cfg, asOperator := operatorUnderInjectionPolicy(ctx)
	installManifests(ctx, "target_policy.yaml", "target_policy_binding.yaml")
	probe := unique("target-policy-probe")
	Eventually(func() error {
		err := asOperator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sourceNamespace, Name: probe}})
		if err == nil {
			Expect(cp.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sourceNamespace, Name: probe}})).To(Succeed())
		}
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(MatchError(ContainSubstring("creates only TrustBundle targets")))
	return cfg, asOperator
}
