package controller_test

import (
	"context"
	"encoding/json"
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
	"github.com/trustplane/trustplane/common/testenv"
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

	It("admits the operator's distribution (new targets, a rotation, the release) and refuses its write into a tenant's ConfigMap of the target's name", func(ctx context.Context) {
		group := unique("target-policy")
		own := newNamespace(ctx, map[string]string{"group": group})
		tenant := newNamespace(ctx, map[string]string{"group": group})
		applyConfigMap(ctx, "tenant", tenant, "ca", map[string]any{"app": "web"}, map[string]any{"app.conf": "x"}, false)

		first, second := testpki.ValidCA("target-policy-1"), testpki.ValidCA("target-policy-2")
		tb := newTrustBundle(group, inline(first.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, own) }).Should(Equal(pemOf(first.PEM())))
		Eventually(func() string { return conditionMessage(ctx, tb, "Ready") }).Should(
			And(ContainSubstring("ConfigMap "+tenant+"/ca"), ContainSubstring("changes and deletes only TrustBundle targets")))
		Expect(configMap(ctx, tenant, "ca").Data).To(Equal(map[string]string{"app.conf": "x"}), "the tenant's ConfigMap is left as it was")
		Expect(configMap(ctx, own, "ca").Annotations).To(HaveKeyWithValue(target.AnnotationKeys, "ca.crt"))

		By("a rotation rewrites the operator's key")
		updateSpec(ctx, tb, func(tb *v1alpha1.TrustBundle) { tb.Spec.Sources = []v1alpha1.Source{inline(second.PEM())} })
		Eventually(func() string { return caData(ctx, own) }).Should(Equal(pemOf(second.PEM())))

		By("once the tenant's ConfigMap is gone, the operator writes its own target there")
		Expect(cp.Client.Delete(ctx, configMap(ctx, tenant, "ca"))).To(Succeed())
		Eventually(func() string { return caData(ctx, tenant) }).Should(Equal(pemOf(second.PEM())))
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		By("the release deletes the operator's targets")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		for _, ns := range []string{own, tenant} {
			Eventually(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }).Should(BeNil(), ns)
		}
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

		const notTarget = "changes and deletes only TrustBundle targets"
		Expect(testenv.Admitted(ctx, asOperator, cm(), map[string]client.Patch{
			"a key's value": mergePatch(`{"data":{"Corefile":"forward . 6.6.6.6"}}`),
			"a key removed": jsonPatch(`[{"op":"remove","path":"/data/Corefile"}]`),
			"a key added":   mergePatch(`{"data":{"mapUsers":"- groups: [system:masters]"}}`),
			"ownership of a key planted in managedFields": jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":` +
				`{"manager":"` + target.FieldManager + `","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:Corefile":{}}}}}]`),
			"a key listed as its own": mergePatch(`{"metadata":{"annotations":{"` + target.AnnotationKeys + `":"Corefile"}}}`),
			"the TrustBundle label":   mergePatch(`{"metadata":{"labels":{"` + target.LabelTrustBundle + `":"tb"}}}`),
			"a label":                 mergePatch(`{"metadata":{"labels":{"app":"other"}}}`),
			"an annotation":           mergePatch(`{"metadata":{"annotations":{"note":null}}}`),
			"a finalizer":             mergePatch(`{"metadata":{"finalizers":["example.com/hold"]}}`),
			"immutable":               mergePatch(`{"immutable":true}`),
			"an owner reference":      mergePatch(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"x","uid":"3f1c0e7a-0000-4000-8000-000000000009"}]}}`),
		}, notTarget)).To(BeEmpty(), "want each refused")
		Expect(asOperator.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}},
			mergePatch(`{"data":{"password":"b3duZWQ="}}`))).To(MatchError(ContainSubstring(notTarget)))

		By("nor may its field manager take over an existing key by applying the same value")
		Expect(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "coredns"},
			"data": map[string]any{"Corefile": "forward . 10.0.0.10"}}}), client.FieldOwner(target.FieldManager))).
			To(MatchError(ContainSubstring(notTarget)))

		By("nor add a key of its own, with the labels of a target, nor delete it")
		Expect(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "coredns",
				"labels":      map[string]any{target.LabelTrustBundle: "tb", labels.OwnerUID: "3f1c0e7a-0000-4000-8000-00000000000a"},
				"annotations": map[string]any{target.AnnotationKeys: "ca.crt"}},
			"data": map[string]any{"ca.crt": "x"}}}), client.FieldOwner(target.FieldManager))).
			To(MatchError(ContainSubstring(notTarget)))
		Expect(asOperator.Delete(ctx, cm())).To(MatchError(ContainSubstring(notTarget)))
		Expect(asOperator.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}})).
			To(MatchError(ContainSubstring(notTarget)))

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
			client.RawPatch(types.MergePatchType, intruder))).To(MatchError(ContainSubstring(notTarget)))
		Expect(asOperator.Delete(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: foreign.Name}})).
			To(MatchError(ContainSubstring(notTarget)))
		Expect(clusterTrustBundle(ctx, foreign.Name)).To(Equal(foreign.Spec.TrustBundle))

		By("in a target of its own, a key and a label a tenant added stay the tenant's")
		own := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca",
			Labels:      map[string]string{target.LabelTrustBundle: "tb", labels.OwnerUID: "3f1c0e7a-0000-4000-8000-00000000000e"},
			Annotations: map[string]string{target.AnnotationKeys: "ca.crt"}},
			Data: map[string]string{"ca.crt": "bundle"}}
		Expect(asOperator.Create(ctx, own)).To(Succeed())
		Expect(cp.Client.Patch(ctx, own.DeepCopy(), mergePatch(`{"metadata":{"labels":{"team":"web"}},"data":{"app.conf":"x"}}`))).To(Succeed())
		for want, patches := range map[string]map[string]client.Patch{
			"changes or removes only the keys it wrote": {
				"the tenant's key": mergePatch(`{"data":{"app.conf":"y"}}`),
				"its removal":      mergePatch(`{"data":{"app.conf":null}}`),
			},
			"lists each key it adds and only keys the object holds": {
				"the tenant's key listed":      mergePatch(`{"metadata":{"annotations":{"` + target.AnnotationKeys + `":"ca.crt,app.conf"}}}`),
				"a key not there listed":       mergePatch(`{"metadata":{"annotations":{"` + target.AnnotationKeys + `":"ca.crt,later"}}}`),
				"a key added but not listed":   mergePatch(`{"data":{"extra":"x"}}`),
				"its own key no longer listed": mergePatch(`{"metadata":{"annotations":{"` + target.AnnotationKeys + `":""}}}`),
			},
			"changes no label or annotation but its own": {
				"the tenant's label":                  mergePatch(`{"metadata":{"labels":{"team":null}}}`),
				"the TrustBundle label, its key kept": mergePatch(`{"metadata":{"labels":{"` + target.LabelTrustBundle + `":null}}}`),
				"a finalizer":                         mergePatch(`{"metadata":{"finalizers":["example.com/hold"]}}`),
			},
		} {
			Expect(testenv.Admitted(ctx, asOperator, own, patches, want)).To(BeEmpty(), want)
		}
		Expect(asOperator.Delete(ctx, own.DeepCopy())).To(MatchError(ContainSubstring("deletes only objects that are all its own")))
		Expect(configMap(ctx, ns, "ca").Data).To(Equal(map[string]string{"ca.crt": "bundle", "app.conf": "x"}))
		By("while it still changes its own key, and takes it out with its marks, leaving the tenant's")
		Expect(asOperator.Patch(ctx, own.DeepCopy(), mergePatch(`{"data":{"ca.crt":"rotated"}}`))).To(Succeed())
		Expect(asOperator.Patch(ctx, own.DeepCopy(), mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":null,"`+labels.OwnerUID+
			`":null},"annotations":{"`+target.AnnotationKeys+`":null}},"data":{"ca.crt":null}}`))).To(Succeed())
		Expect(configMap(ctx, ns, "ca").Data).To(Equal(map[string]string{"app.conf": "x"}))

		By("the tenant's ConfigMap and Secret are as they were")
		kept := configMap(ctx, ns, "coredns")
		Expect(kept.Data).To(Equal(map[string]string{"Corefile": "forward . 10.0.0.10"}))
		Expect(kept.Labels).To(HaveKeyWithValue("app", "dns"))
		Expect(kept.Annotations).To(HaveKeyWithValue("note", "kept"))
		Expect(kept.Finalizers).To(BeEmpty())
		Expect(kept.OwnerReferences).To(BeEmpty())
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		Expect(secret.Data).To(Equal(map[string][]byte{"password": []byte("s3cret")}))
	})
})

// bundle-operator's ClusterRole patches every TrustBundle (its finalizer,
// the environment label), which RBAC cannot narrow to metadata: its token
// could otherwise put a CA of its own into a TrustBundle's sources, and the
// operator would distribute it to every target.
var _ = Describe("The own-resources policy: bundle-operator's service account changes only the finalizer and environment label of TrustBundles", func() {
	It("refuses a change of a TrustBundle's spec, labels, annotations, owners or other finalizers", func(ctx context.Context) {
		_, asOperator := operatorUnderPolicies(ctx)
		tb := newTrustBundle(unique("own-resources"), inline(testpki.ValidCA("own-resources").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() []string { return get(ctx, tb).Finalizers }).Should(ContainElement(labels.Finalizer), "the operator's own finalizer is admitted")
		intruder, err := json.Marshal(map[string]any{"spec": map[string]any{"sources": []any{map[string]any{"inline": testpki.ValidCA("intruder").PEM()}}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(testenv.Admitted(ctx, asOperator, get(ctx, tb), map[string]client.Patch{
			"the sources":           client.RawPatch(types.MergePatchType, intruder),
			"the namespaces":        mergePatch(`{"spec":{"target":{"namespaceSelector":{"matchLabels":null}}}}`),
			"a label":               mergePatch(`{"metadata":{"labels":{"team":"x"}}}`),
			"the environment label": mergePatch(`{"metadata":{"labels":{"` + labels.Environment + `":"other"}}}`),
			"an annotation":         mergePatch(`{"metadata":{"annotations":{"x":"y"}}}`),
			"another finalizer":     mergePatch(`{"metadata":{"finalizers":["` + labels.Finalizer + `","example.com/hold"]}}`),
		}, "bundle-operator changes no")).To(BeEmpty(), "want each refused")
		Expect(get(ctx, tb).Spec).To(Equal(tb.Spec))
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
	})
})

// operatorUnderPolicies creates the operator's service account with its
// RBAC (operatorIdentity) and the admission policies config/rbac puts beside
// its ClusterRole (injection, targets, its own resources), unchanged, and returns the
// account's configuration and a client of it once the API server enforces
// both on it.
func operatorUnderPolicies(ctx context.Context) (*rest.Config, client.Client) {
	cfg, asOperator := operatorUnderInjectionPolicy(ctx)
	installManifests(ctx, "target_policy.yaml", "target_policy_binding.yaml", "own_resources_policy.yaml", "own_resources_policy_binding.yaml")
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
