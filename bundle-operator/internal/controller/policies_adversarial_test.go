package controller_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/testenv"
)

// Second review of config/rbac/target_policy.yaml and
// own_resources_policy.yaml against bundle-operator's stolen token. Every
// spec asserts what the policies promise; a failing spec names a hole (or a
// legitimate write refused). Attempts are logged as "ATTACK <name>:
// refused|ADMITTED".
var _ = Describe("Adversarial: bundle-operator policies, second review", Ordered, ContinueOnFailure, func() {
	var asOperator client.Client
	const fakeUID = "3f1c0e7a-0000-4000-8000-0000000000c1"
	targetLabels := map[string]string{target.LabelTrustBundle: "tb", labels.OwnerUID: fakeUID}

	BeforeAll(func(ctx context.Context) {
		_, asOperator = operatorUnderPolicies(ctx)
	})

	It("creates a target that lists keys it does not hold, then changes the tenant's key once the tenant adds it", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		var holes []string
		// The create check never asks that claimedAfter lie within newKeys.
		collect(&holes, "create a target listing an absent key (app.conf)", asOperator.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config", Labels: targetLabels,
				Annotations: map[string]string{target.AnnotationKeys: "ca.crt,app.conf"}},
			Data: map[string]string{"ca.crt": "bundle"}}))
		// The tenant's later `kubectl apply` of its own app-config adds its key.
		if cm := configMap(ctx, ns, "app-config"); cm != nil {
			Expect(cp.Client.Patch(ctx, cmRef(ns, "app-config"), mergePatch(`{"data":{"app.conf":"tenant"}}`),
				client.FieldOwner("kubectl-client-side-apply"))).To(Succeed())
			collect(&holes, "change the tenant's key through the claim planted at create", asOperator.Patch(ctx, cmRef(ns, "app-config"),
				mergePatch(`{"data":{"app.conf":"attacker"}}`)))
		}

		// The same with a forged managedFields entry supplied on create.
		collect(&holes, "create a target with a forged Apply entry on an absent key", asOperator.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config2", Labels: targetLabels,
				Annotations: map[string]string{target.AnnotationKeys: "ca.crt"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: target.FieldManager, Operation: metav1.ManagedFieldsOperationApply,
					APIVersion: "v1", FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:ca.crt":{},"f:app.conf":{}}}`)}}}},
			Data: map[string]string{"ca.crt": "bundle"}}))
		if cm := configMap(ctx, ns, "app-config2"); cm != nil {
			Expect(cp.Client.Patch(ctx, cmRef(ns, "app-config2"), mergePatch(`{"data":{"app.conf":"tenant"}}`),
				client.FieldOwner("kubectl-client-side-apply"))).To(Succeed())
			collect(&holes, "change the tenant's key through the forged create-time entry", asOperator.Patch(ctx, cmRef(ns, "app-config2"),
				mergePatch(`{"data":{"app.conf":"attacker"}}`)))
		}
		Expect(holes).To(BeEmpty(), "admitted: a claim on a key the object did not hold")
	})

	It("takes the TrustBundle label off in the very write that adds its keys (identity parameters no longer count as forged)", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		var holes []string
		forged := map[string]string{
			"identity-operator-settings":  `{"TRUST_DOMAIN":"example.org","PARENT_ID":"spiffe://example.org/spire/agent/x509pop/attacker","MAX_SVID_TTL":"8760h","CLUSTER_SPIFFEID_CLASS_NAME":""}`,
			"identity-boundary-admission": `{"allowedGroups":"system:authenticated","allowedUsers":""}`,
		}
		keys := map[string]string{
			"identity-operator-settings":  "CLUSTER_SPIFFEID_CLASS_NAME,MAX_SVID_TTL,PARENT_ID,TRUST_DOMAIN",
			"identity-boundary-admission": "allowedGroups,allowedUsers",
		}
		for name, data := range forged {
			// An empty target: no key, nothing it "wrote".
			Expect(asOperator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: targetLabels}})).
				To(Succeed(), "an empty target is a legitimate create")
			collect(&holes, "add the keys and drop both labels in one patch of "+name, asOperator.Patch(ctx, cmRef(ns, name),
				mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":null,"`+labels.OwnerUID+`":null},`+
					`"annotations":{"`+target.AnnotationKeys+`":"`+keys[name]+`"}},"data":`+data+`}`)))
			cm := configMap(ctx, ns, name)
			fmt.Fprintf(GinkgoWriter, "%s now: labels %v data %v\n", name, cm.Labels, cm.Data)
		}
		By("a target with a key of its own: swap it for the forged keys and drop the label")
		Expect(asOperator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swap", Labels: targetLabels,
			Annotations: map[string]string{target.AnnotationKeys: "ca.crt"}}, Data: map[string]string{"ca.crt": "bundle"}})).To(Succeed())
		collect(&holes, "swap ca.crt for TRUST_DOMAIN and drop the TrustBundle label", asOperator.Patch(ctx, cmRef(ns, "swap"),
			mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":null},"annotations":{"`+target.AnnotationKeys+`":"TRUST_DOMAIN"}},`+
				`"data":{"ca.crt":null,"TRUST_DOMAIN":"evil.org"}}`)))
		Expect(holes).To(BeEmpty(), "admitted: a ConfigMap of the operator's keys without the TrustBundle label")
	})

	It("creates targets with labels it never writes, and ClusterTrustBundles of a signer", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		var holes []string
		withForeign := map[string]string{"app.kubernetes.io/managed-by": "Helm", "grafana_dashboard": "1", "prometheus-rule": "true"}
		for k, v := range targetLabels {
			withForeign[k] = v
		}
		collect(&holes, "create a target with foreign labels (managed-by Helm, grafana_dashboard, ...)", asOperator.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "labelled", Labels: withForeign,
				Annotations: map[string]string{target.AnnotationKeys: "dashboard.json"}},
			Data: map[string]string{"dashboard.json": "{}"}}))
		for _, signer := range []string{"example.com/signer", "kubernetes.io/kube-apiserver-client"} {
			name := map[string]string{"example.com/signer": "example.com:signer:", "kubernetes.io/kube-apiserver-client": "kubernetes.io:kube-apiserver-client:"}[signer] + unique("atk")
			ctb := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: targetLabels,
				Annotations: map[string]string{target.AnnotationKeys: "trustBundle"}},
				Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: testpki.ValidCA("atk-signer").PEM()}}
			err := asOperator.Create(ctx, ctb)
			collect(&holes, "create a ClusterTrustBundle of signer "+signer, err)
			if err == nil {
				DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, ctb))).To(Succeed()) })
			}
		}
		Expect(holes).To(BeEmpty())
	})

	It("own resources: request shapes on a TrustBundle's spec and metadata", func(ctx context.Context) {
		tb := newTrustBundle(unique("atk-own"), inline(testpki.ValidCA("atk-own").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			_ = cp.Client.Patch(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: tb.Name}}, mergePatch(`{"metadata":{"finalizers":null}}`))
			_ = client.IgnoreNotFound(cp.Client.Delete(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: tb.Name}}))
		})
		Eventually(func() []string { return get(ctx, tb).Finalizers }).WithTimeout(30e9).Should(ContainElement(labels.Finalizer))
		before := get(ctx, tb).Spec
		other := testpki.ValidCA("atk-own-2").PEM()
		otherJSON := fmt.Sprintf("%q", other)
		admitted := testenv.Admitted(ctx, asOperator, get(ctx, tb), map[string]client.Patch{
			"JSON patch replace /spec":     jsonPatch(`[{"op":"replace","path":"/spec/sources","value":[{"inline":` + otherJSON + `}]}]`),
			"JSON patch remove /spec":      jsonPatch(`[{"op":"remove","path":"/spec"}]`),
			"remove the environment label": mergePatch(`{"metadata":{"labels":{"` + labels.Environment + `":null}}}`),
			"deletionGracePeriodSeconds":   mergePatch(`{"metadata":{"deletionGracePeriodSeconds":0}}`),
		}, "denied request")
		// API validation refusing the write (an immutable field) counts as refused too.
		for i := 0; i < len(admitted); i++ {
			if containsAny(admitted[i], "field is immutable") {
				admitted = append(admitted[:i], admitted[i+1:]...)
				i--
			}
		}
		applied := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TrustBundle",
			"metadata": map[string]any{"name": tb.Name}, "spec": map[string]any{"sources": []any{map[string]any{"inline": other}}}}}
		errApply := asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner("attacker"), client.ForceOwnership)
		if errApply == nil {
			admitted = append(admitted, "server-side apply with force")
		}
		full := get(ctx, tb)
		full.Spec.Sources = []v1alpha1.Source{inline(other)}
		if err := asOperator.Update(ctx, full); err == nil {
			admitted = append(admitted, "update with a full object")
		}
		st := get(ctx, tb)
		_ = asOperator.Status().Patch(ctx, st, mergePatch(`{"spec":{"sources":[{"inline":`+otherJSON+`}]}}`))
		fmt.Fprintf(GinkgoWriter, "ATTACK own-resources admitted: %v (apply err %v)\n", admitted, errApply)
		Expect(get(ctx, tb).Spec).To(Equal(before), "the spec changed")
		Expect(admitted).To(BeEmpty())
	})

	It("LEGIT: the controller's finalizer patch on a TrustBundle without spec, and its stamp over an empty environment label", func(ctx context.Context) {
		var refused []string
		// A TrustBundle without spec: the CRD does not require one.
		name := unique("atk-nospec")
		nospec := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TrustBundle",
			"metadata": map[string]any{"name": name, "labels": map[string]any{labels.Environment: "elsewhere"}}}}
		if err := cp.Client.Create(ctx, nospec); err != nil {
			fmt.Fprintf(GinkgoWriter, "a TrustBundle without spec is not accepted: %v\n", err)
		} else {
			DeferCleanup(func(ctx context.Context) {
				_ = cp.Client.Patch(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}}, mergePatch(`{"metadata":{"finalizers":null}}`))
				_ = client.IgnoreNotFound(cp.Client.Delete(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}}))
			})
			tb := &v1alpha1.TrustBundle{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, tb)).To(Succeed())
			if tb.Spec.Target.ConfigMap == nil && len(tb.Spec.Sources) == 0 {
				before := tb.DeepCopy()
				tb.Finalizers = append(tb.Finalizers, labels.Finalizer)
				if err := asOperator.Patch(ctx, tb, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil &&
					!containsAny(err.Error(), "the object has been modified") {
					refused = append(refused, "add the finalizer to a TrustBundle without spec: "+err.Error())
				}
			}
		}
		// The environment label present but empty: stampsEnvironment treats
		// it as absent and sets the default environment.
		tb := newTrustBundle(unique("atk-emptyenv"), inline(testpki.ValidCA("atk-emptyenv").PEM()))
		tb.Labels = map[string]string{labels.Environment: ""}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			_ = cp.Client.Patch(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: tb.Name}}, mergePatch(`{"metadata":{"finalizers":null}}`))
			_ = client.IgnoreNotFound(cp.Client.Delete(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: tb.Name}}))
		})
		if err := asOperator.Patch(ctx, &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: tb.Name}},
			mergePatch(`{"metadata":{"finalizers":["`+labels.Finalizer+`"],"labels":{"`+labels.Environment+`":"test"}}}`)); err != nil {
			refused = append(refused, "stamp the default environment over an empty label (updateFinalizer): "+err.Error())
		}
		Expect(refused).To(BeEmpty(), "legitimate controller writes refused")
	})
})

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if len(sub) > 0 && len(s) >= len(sub) {
			for i := 0; i+len(sub) <= len(s); i++ {
				if s[i:i+len(sub)] == sub {
					return true
				}
			}
		}
	}
	return false
}
