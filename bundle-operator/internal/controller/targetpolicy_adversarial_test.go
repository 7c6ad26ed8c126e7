package controller_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/labels"
)

// Attacks on config/rbac/target_policy.yaml by whoever holds bundle-operator's
// service account token. Every spec asserts what the policy promises (the
// attack is refused); a failing spec names an attack that went through. Each
// attempt is logged as "ATTACK <name>: refused|ADMITTED" (run with
// -ginkgo.v to see them).
var _ = Describe("Adversarial: the target policy against bundle-operator's stolen token", Ordered, ContinueOnFailure, func() {
	var asOperator client.Client
	const fakeUID = "3f1c0e7a-0000-4000-8000-0000000000aa"
	targetLabels := map[string]string{target.LabelTrustBundle: "tb", labels.OwnerUID: fakeUID}

	BeforeAll(func(ctx context.Context) {
		_, asOperator = operatorUnderPolicies(ctx)
	})

	It("adds a new key to a foreign ConfigMap it never wrote (aws-auth mapUsers, envFrom settings, boundary params)", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		// EKS's aws-auth usually holds mapRoles only; mapUsers maps an IAM
		// principal to Kubernetes groups.
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "aws-auth"},
			Data: map[string]string{"mapRoles": "- rolearn: arn:aws:iam::111:role/node\n  username: system:node:{{EC2PrivateDNSName}}\n  groups: [system:nodes]\n"}})).To(Succeed())
		// identity-operator's settings as the chart writes them (labels of
		// the chart, all four keys): its Deployment takes them with envFrom,
		// and viper's AutomaticEnv reads every flag from the environment.
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "identity-operator-settings",
			Labels: map[string]string{"app.kubernetes.io/name": "trustplane"}},
			Data: map[string]string{"TRUST_DOMAIN": "example.org", "PARENT_ID": "spiffe://example.org/k8s-cluster-nodes", "MAX_SVID_TTL": "24h", "CLUSTER_SPIFFEID_CLASS_NAME": ""}})).To(Succeed())
		// The boundary's parameters of an installation that uses no groups
		// and dropped the key.
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "identity-boundary-admission"},
			Data: map[string]string{"allowedUsers": "system:serviceaccount:kube-system:replicaset-controller"}})).To(Succeed())

		var holes []string
		collect(&holes, "add mapUsers (system:masters) to aws-auth", asOperator.Patch(ctx, cmRef(ns, "aws-auth"),
			mergePatch(`{"data":{"mapUsers":"- userarn: arn:aws:iam::666:user/evil\n  username: evil\n  groups: [system:masters]\n"}}`)))
		collect(&holes, "add PPROF_BIND_ADDRESS/ENVIRONMENTS env to identity-operator-settings (envFrom)", asOperator.Patch(ctx, cmRef(ns, "identity-operator-settings"),
			mergePatch(`{"data":{"PPROF_BIND_ADDRESS":":6060","ENVIRONMENTS":"none","HTTPS_PROXY":"http://evil:3128"}}`)))
		collect(&holes, "add allowedGroups=system:authenticated to the boundary parameters, without the TrustBundle label", asOperator.Patch(ctx, cmRef(ns, "identity-boundary-admission"),
			mergePatch(`{"data":{"allowedGroups":"system:authenticated"}}`)))
		collect(&holes, "add a key by server-side apply with the operator's field manager (no labels)", asOperator.Apply(ctx,
			client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "aws-auth"},
				"data": map[string]any{"mapAccounts": "- \"666\"\n"}}}), client.FieldOwner(target.FieldManager)))
		Expect(configMap(ctx, ns, "identity-boundary-admission").Labels).NotTo(HaveKey(target.LabelTrustBundle),
			"the forged parameters do not even carry the label the identity policies look for")
		Expect(holes).To(BeEmpty(), "admitted: a foreign ConfigMap gained keys the operator made up")
	})

	It("plants a claim on a key that does not exist yet, or was removed, and uses it once the owner (re-)adds it", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
			Data: map[string]string{"app.conf": "a", "tls.crt": "owner's"}})).To(Succeed())
		var holes []string

		By("a claim on a future key through the keys annotation")
		collect(&holes, "list a key that does not exist yet in bundle.trustplane.dev/keys", asOperator.Patch(ctx, cmRef(ns, "app"),
			mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":"extra.conf"}}}`)))
		Expect(cp.Client.Patch(ctx, cmRef(ns, "app"), mergePatch(`{"data":{"extra.conf":"owner's later key"}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
		collect(&holes, "change the owner's later key through the planted claim", asOperator.Patch(ctx, cmRef(ns, "app"),
			mergePatch(`{"data":{"extra.conf":"attacker"}}`)))

		By("a claim planted while the owner's key is briefly removed (a rollout that drops and re-adds it)")
		Expect(cp.Client.Patch(ctx, cmRef(ns, "app"), mergePatch(`{"data":{"tls.crt":null}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
		collect(&holes, "claim a removed key", asOperator.Patch(ctx, cmRef(ns, "app"),
			mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":"extra.conf,tls.crt"}}}`)))
		Expect(cp.Client.Patch(ctx, cmRef(ns, "app"), mergePatch(`{"data":{"tls.crt":"owner's again"}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
		collect(&holes, "change the re-added key through the claim", asOperator.Patch(ctx, cmRef(ns, "app"),
			mergePatch(`{"data":{"tls.crt":"attacker"}}`)))

		By("a forged managedFields entry of the operator's Apply on a key that does not exist yet")
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app2"},
			Data: map[string]string{"app.conf": "a"}})).To(Succeed())
		collect(&holes, "forge Apply ownership of a future key", asOperator.Patch(ctx, cmRef(ns, "app2"), jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":`+
			`{"manager":"`+target.FieldManager+`","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:later":{}}}}}]`)))
		// The owner then adds the key with server-side apply of its own,
		// forcing past the conflict the forged entry raises, or by update.
		Expect(cp.Client.Patch(ctx, cmRef(ns, "app2"), mergePatch(`{"data":{"later":"owner's"}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
		collect(&holes, "change the key the forged entry named once the owner added it by update", asOperator.Patch(ctx, cmRef(ns, "app2"),
			mergePatch(`{"data":{"later":"attacker"}}`)))

		cm := configMap(ctx, ns, "app")
		fmt.Fprintf(GinkgoWriter, "app now: %v annotations %v\n", cm.Data, cm.Annotations)
		fmt.Fprintf(GinkgoWriter, "app2 now: %v\n", configMap(ctx, ns, "app2").Data)
		Expect(holes).To(BeEmpty(), "admitted: a claim planted before the key existed")
	})

	It("deletes, and then replaces, a foreign ConfigMap or Secret that holds no key, after labelling it as a target", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock"}})).To(Succeed())
		Expect(cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "placeholder"}})).To(Succeed())
		var holes []string
		collect(&holes, "label a foreign empty ConfigMap as a target", asOperator.Patch(ctx, cmRef(ns, "lock"),
			mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":"tb"}}}`)))
		collect(&holes, "delete the foreign empty ConfigMap", asOperator.Delete(ctx, cmRef(ns, "lock")))
		collect(&holes, "recreate it with content of the attacker's", asOperator.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock", Labels: targetLabels}, Data: map[string]string{"holder": "attacker"}}))
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "placeholder"}}
		collect(&holes, "label a foreign empty Secret as a target", asOperator.Patch(ctx, sec,
			mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":"tb"}}}`)))
		collect(&holes, "delete the foreign empty Secret", asOperator.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "placeholder"}}))
		Expect(holes).To(BeEmpty(), "admitted: a foreign object deleted")
	})

	It("creates Secrets that are credentials, or objects with metadata the operator never writes", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		var holes []string
		// kube-controller-manager's token controller fills in a token of
		// the named service account; the operator's list on Secrets then
		// reads it.
		collect(&holes, "create a kubernetes.io/service-account-token Secret for another service account", asOperator.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token", Labels: targetLabels,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken}))
		// With --enable-bootstrap-token-auth (kubeadm) this authenticates
		// as system:bootstrap:abcdef in the groups given.
		collect(&holes, "create a bootstrap token Secret in kube-system", asOperator.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef", Labels: targetLabels},
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: map[string]string{"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
				"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}))
		collect(&holes, "create a kubernetes.io/dockerconfigjson Secret", asOperator.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "regcred", Labels: targetLabels},
			Type:       corev1.SecretTypeDockerConfigJson, StringData: map[string]string{".dockerconfigjson": `{"auths":{}}`}}))
		collect(&holes, "create a ConfigMap with foreign annotations, a finalizer, an owner reference and immutable", asOperator.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "odd", Labels: targetLabels,
				Annotations: map[string]string{"kubernetes.io/description": "anything"},
				Finalizers:  []string{"example.com/hold"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: ns,
					UID: "3f1c0e7a-0000-4000-8000-0000000000ab"}}},
			Immutable: ptrTo(true)}))
		// Clean up what got through so the namespace can go.
		for _, o := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef"}},
		} {
			_ = cp.Client.Delete(ctx, o)
		}
		_ = cp.Client.Patch(ctx, cmRef(ns, "odd"), mergePatch(`{"metadata":{"finalizers":null}}`))
		Expect(holes).To(BeEmpty(), "admitted: the create check reads only two labels")
	})

	It("changes metadata of a foreign object: labels of ours, managedFields, the TrustBundle label on the identity parameters", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		applyConfigMap(ctx, "tenant", ns, "tenant", map[string]any{"app": "web", labels.Environment: "prod"}, map[string]any{"k": "v"}, false)
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "identity-boundary-admission"},
			Data: map[string]string{"allowedGroups": "", "allowedUsers": "system:serviceaccount:kube-system:replicaset-controller"}})).To(Succeed())
		var holes []string
		collect(&holes, "change a foreign object's trustplane.dev/environment label", asOperator.Patch(ctx, cmRef(ns, "tenant"),
			mergePatch(`{"metadata":{"labels":{"`+labels.Environment+`":"attacker"}}}`)))
		collect(&holes, "add owner labels naming another owner", asOperator.Patch(ctx, cmRef(ns, "tenant"),
			mergePatch(`{"metadata":{"labels":{"`+labels.OwnerUID+`":"x","`+labels.OwnerKind+`":"IdentityBinding"}}}`)))
		collect(&holes, "wipe the tenant's managedFields", asOperator.Patch(ctx, cmRef(ns, "tenant"),
			jsonPatch(`[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]`)))
		collect(&holes, "label the boundary parameters as a target (every labelled pod refused: DoS)", asOperator.Patch(ctx, cmRef(ns, "identity-boundary-admission"),
			mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":"tb"}}}`)))
		cm := configMap(ctx, ns, "tenant")
		managers := []string{}
		for _, m := range cm.ManagedFields {
			managers = append(managers, m.Manager+"/"+string(m.Operation))
		}
		fmt.Fprintf(GinkgoWriter, "tenant now: labels %v managers %v\n", cm.Labels, managers)
		Expect(holes).To(BeEmpty(), "admitted: metadata of a foreign object changed")
	})

	It("refuses the request shapes that would change or remove a foreign key", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		applyConfigMap(ctx, "tenant", ns, "victim", map[string]any{"app": "web"}, map[string]any{"Corefile": "forward . 10.0.0.10"}, false)
		Expect(cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Data: map[string][]byte{"password": []byte("s3cret")}})).To(Succeed())
		binaryCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bin"}, BinaryData: map[string][]byte{"blob": {1, 2}}}
		Expect(cp.Client.Create(ctx, binaryCM)).To(Succeed())
		var holes []string
		victim := func() client.Object { return cmRef(ns, "victim") }
		collect(&holes, "merge patch data: null", asOperator.Patch(ctx, victim(), mergePatch(`{"data":null}`)))
		collect(&holes, "JSON patch replace /data", asOperator.Patch(ctx, victim(), jsonPatch(`[{"op":"replace","path":"/data","value":{"x":"y"}}]`)))
		collect(&holes, "JSON patch move Corefile to binaryData", asOperator.Patch(ctx, victim(),
			jsonPatch(`[{"op":"remove","path":"/data/Corefile"},{"op":"add","path":"/binaryData","value":{"Corefile":"`+base64.StdEncoding.EncodeToString([]byte("forward . 6.6.6.6"))+`"}}]`)))
		collect(&holes, "strategic merge patch $patch: replace", asOperator.Patch(ctx, victim(),
			client.RawPatch(types.StrategicMergePatchType, []byte(`{"data":{"$patch":"replace","x":"y"}}`))))
		collect(&holes, "dry-run change of a foreign key", asOperator.Patch(ctx, victim(), mergePatch(`{"data":{"Corefile":"x"}}`), client.DryRunAll))
		collect(&holes, "apply with force of another value with the operator's manager", asOperator.Apply(ctx,
			client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "victim",
					"annotations": map[string]any{target.AnnotationKeys: "Corefile"}},
				"data": map[string]any{"Corefile": "forward . 6.6.6.6"}}}), client.FieldOwner(target.FieldManager), client.ForceOwnership))
		collect(&holes, "apply with force with another field manager", asOperator.Apply(ctx,
			client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "victim"},
				"data": map[string]any{"Corefile": "forward . 6.6.6.6"}}}), client.FieldOwner("tenant"), client.ForceOwnership))
		stale := configMap(ctx, ns, "victim")
		stale.Data["Corefile"] = "forward . 6.6.6.6"
		// The operator has no update verb; patch the full object instead.
		collect(&holes, "full-object merge patch from a read copy", asOperator.Patch(ctx, stale, client.MergeFrom(configMap(ctx, ns, "victim"))))
		collect(&holes, "claim with a comma-joined list naming a foreign key", asOperator.Patch(ctx, victim(),
			mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":"ca.crt,Corefile"}}}`)))
		collect(&holes, "claim with spaces", asOperator.Patch(ctx, victim(),
			mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":" Corefile"}}}`)))
		collect(&holes, "claim and change in one request", asOperator.Patch(ctx, victim(),
			mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":"Corefile"}},"data":{"Corefile":"x"}}`)))
		collect(&holes, "forged Apply entry on the foreign key together with a change", asOperator.Patch(ctx, victim(), jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":`+
			`{"manager":"`+target.FieldManager+`","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:Corefile":{}}}}},`+
			`{"op":"replace","path":"/data/Corefile","value":"x"}]`)))
		collect(&holes, "forged Apply ownership of a data key under f:binaryData", asOperator.Patch(ctx, victim(), jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":`+
			`{"manager":"`+target.FieldManager+`","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:binaryData":{"f:Corefile":{}}}}}]`)))
		collect(&holes, "change the now 'owned' data key", asOperator.Patch(ctx, victim(), mergePatch(`{"data":{"Corefile":"x"}}`)))
		collect(&holes, "change a foreign binaryData key", asOperator.Patch(ctx, cmRef(ns, "bin"), mergePatch(`{"binaryData":{"blob":"AAA="}}`)))
		collect(&holes, "move a foreign binaryData key to data", asOperator.Patch(ctx, cmRef(ns, "bin"), mergePatch(`{"binaryData":null,"data":{"blob":"x"}}`)))
		collect(&holes, "Secret stringData over a foreign key", asOperator.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}},
			mergePatch(`{"stringData":{"password":"owned"}}`)))
		collect(&holes, "Secret type change", asOperator.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}},
			mergePatch(`{"type":"kubernetes.io/tls"}`)))
		uid := stale.UID
		collect(&holes, "delete with preconditions", asOperator.Delete(ctx, victim(), client.Preconditions{UID: &uid}))
		collect(&holes, "dry-run delete", asOperator.Delete(ctx, victim(), client.DryRunAll))
		Expect(configMap(ctx, ns, "victim").Data).To(Equal(map[string]string{"Corefile": "forward . 10.0.0.10"}))
		Expect(holes).To(BeEmpty())
	})

	It("refuses ClusterTrustBundle tricks on a foreign one", func(ctx context.Context) {
		foreign := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: unique("atk-ctb")},
			Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: testpki.ValidCA("atk-ctb").PEM()}}
		Expect(cp.Client.Create(ctx, foreign)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, foreign))).To(Succeed()) })
		ref := func() *certificatesv1.ClusterTrustBundle {
			return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: foreign.Name}}
		}
		var holes []string
		collect(&holes, "label a foreign CTB as a target", asOperator.Patch(ctx, ref(),
			mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":"tb","`+labels.OwnerUID+`":"`+fakeUID+`"}}}`)))
		collect(&holes, "claim trustBundle of a foreign CTB", asOperator.Patch(ctx, ref(),
			mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":"trustBundle"}}}`)))
		collect(&holes, "forge Apply ownership of f:spec.f:trustBundle", asOperator.Patch(ctx, ref(), jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":`+
			`{"manager":"`+target.FieldManager+`","operation":"Apply","apiVersion":"certificates.k8s.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:trustBundle":{}}}}}]`)))
		collect(&holes, "forge Apply ownership under f:data for a CTB", asOperator.Patch(ctx, ref(), jsonPatch(`[{"op":"add","path":"/metadata/managedFields/-","value":`+
			`{"manager":"`+target.FieldManager+`","operation":"Apply","apiVersion":"certificates.k8s.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:trustBundle":{}}}}}]`)))
		collect(&holes, "apply same content with the operator's manager (co-ownership)", asOperator.Apply(ctx,
			client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle", "metadata": map[string]any{"name": foreign.Name},
				"spec": map[string]any{"trustBundle": foreign.Spec.TrustBundle}}}), client.FieldOwner(target.FieldManager)))
		collect(&holes, "delete the labelled foreign CTB", asOperator.Delete(ctx, ref()))
		v1beta1 := &unstructured.Unstructured{}
		v1beta1.SetAPIVersion("certificates.k8s.io/v1beta1")
		v1beta1.SetKind("ClusterTrustBundle")
		v1beta1.SetName(foreign.Name)
		err := asOperator.Patch(ctx, v1beta1, mergePatch(`{"spec":{"trustBundle":"`+strings.ReplaceAll(testpki.ValidCA("atk-ctb-2").PEM(), "\n", `\n`)+`"}}`))
		collect(&holes, "rewrite through v1beta1", err)
		Expect(clusterTrustBundle(ctx, foreign.Name)).To(Equal(foreign.Spec.TrustBundle))
		Expect(holes).To(BeEmpty())
	})

	It("creates a missing identity parameter ConfigMap, then takes the TrustBundle label off so that it no longer counts as forged", func(ctx context.Context) {
		// identity-operator-settings and identity-boundary-admission while
		// they are missing (install order, a deletion, a kustomize overlay):
		// the identity policies treat a ConfigMap labelled
		// bundle.trustplane.dev/trustbundle as forged. The token may create
		// one, as a target, but the label goes only with every key it wrote.
		ns := newNamespace(ctx, nil)
		created := map[string]map[string]string{
			"identity-boundary-admission": {"allowedGroups": "system:authenticated", "allowedUsers": ""},
			"identity-operator-settings": {"TRUST_DOMAIN": "example.org", "PARENT_ID": "spiffe://example.org/spire/agent/x509pop/attacker",
				"MAX_SVID_TTL": "8760h", "CLUSTER_SPIFFEID_CLASS_NAME": ""},
		}
		var holes []string
		for name, data := range created {
			keys := make([]string, 0, len(data))
			for k := range data {
				keys = append(keys, k)
			}
			Expect(asOperator.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: targetLabels,
					Annotations: map[string]string{target.AnnotationKeys: strings.Join(keys, ",")}},
				Data: data})).To(Succeed(), "a target of its own, which the identity policies count as none")
			collect(&holes, "remove the TrustBundle and owner labels of "+name, asOperator.Patch(ctx, cmRef(ns, name),
				mergePatch(`{"metadata":{"labels":{"`+target.LabelTrustBundle+`":null,"`+labels.OwnerUID+`":null}}}`)))
			collect(&holes, "remove the keys annotation, then the labels, of "+name, asOperator.Patch(ctx, cmRef(ns, name),
				mergePatch(`{"metadata":{"annotations":{"`+target.AnnotationKeys+`":null}}}`)))
			Expect(configMap(ctx, ns, name).Labels).To(HaveKeyWithValue(target.LabelTrustBundle, "tb"), name)
		}
		Expect(holes).To(BeEmpty(), "admitted: parameters the identity policies honour, written by bundle-operator's token")
	})

	// A documented limit: a target the previous release wrote (its keys not
	// listed) and that was hand-edited before the upgrade is not repaired:
	// its key is neither listed nor owned by the operator any more. The
	// TrustBundle's Ready condition names it; deleting it lets the operator
	// write it anew.
	It("LIMIT: a target written before the keys annotation existed and hand-edited before the upgrade is not repaired", func(ctx context.Context) {
		ns := newNamespace(ctx, nil)
		ownLabels := map[string]any{target.LabelTrustBundle: "tb-legacy", labels.OwnerUID: fakeUID, labels.OwnerKind: "TrustBundle",
			labels.OwnerName: "tb-legacy", labels.Environment: "test"}
		// As the previous release wrote it: hash annotation only.
		Expect(cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "ca", "labels": ownLabels,
				"annotations": map[string]any{target.AnnotationHash: "old"}},
			"data": map[string]any{"ca.crt": "bundle"}}}), client.FieldOwner(target.FieldManager), client.ForceOwnership)).To(Succeed())
		By("an admin hand-edits the key before the upgrade")
		Expect(cp.Client.Patch(ctx, cmRef(ns, "ca"), mergePatch(`{"data":{"ca.crt":"hand edit"}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
		By("the upgraded operator force-applies its target, as syncOne does for an object labelled as its own")
		err := asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": "ca", "labels": ownLabels,
				"annotations": map[string]any{target.AnnotationHash: "new", target.AnnotationKeys: "ca.crt"}},
			"data": map[string]any{"ca.crt": "bundle"}}}), client.FieldOwner(target.FieldManager), client.ForceOwnership)
		Expect(err).To(MatchError(ContainSubstring("changes or removes only the keys it wrote")))
		Expect(keyData(ctx, ns, "ca", "ca.crt")).To(Equal("hand edit"))
	})
})

// collect records in holes an attack what that went through (err nil), and
// logs its outcome as "ATTACK <what>: refused|ADMITTED".
func collect(holes *[]string, what string, err error) {
	if err != nil {
		fmt.Fprintf(GinkgoWriter, "ATTACK %s: refused (%v)\n", what, err)
		return
	}
	fmt.Fprintf(GinkgoWriter, "ATTACK %s: ADMITTED\n", what)
	*holes = append(*holes, what)
}
