package controller_test

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/testenv"
)

// operatorUnderInjectionPolicy creates the operator's service account with
// its RBAC (operatorIdentity) and the policy config/rbac puts beside its
// ClusterRole, unchanged, and returns the account's configuration and a
// client of it once the API server enforces the policy on it.
func operatorUnderInjectionPolicy(ctx context.Context) (*rest.Config, client.Client) {
	cfg := operatorIdentity(ctx)
	asOperator, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	installManifests(ctx, "injection_policy.yaml", "injection_policy_binding.yaml")
	probe := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("policy-probe"), "none")
	probe.obj.SetAnnotations(nil)
	Expect(cp.Client.Create(ctx, probe.obj.DeepCopy())).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(cp.Client.Delete(ctx, probe.obj.DeepCopy())).To(Succeed()) })
	Eventually(func() error {
		return asOperator.Patch(ctx, probe.obj.DeepCopy(), caBundlePatch("/webhooks/0/clientConfig/caBundle", "probe"))
	}, 30*time.Second, 100*time.Millisecond).Should(MatchError(ContainSubstring("only objects annotated")))
	return cfg, asOperator
}

// installManifests creates the objects of files in config/rbac, unchanged,
// unless they exist.
func installManifests(ctx context.Context, files ...string) {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join("..", "..", "config", "rbac", f)
	}
	Expect(testenv.CreateManifests(ctx, cp.Client, paths...)).To(Succeed())
}

// caBundlePatch is a JSON patch that sets the caBundle at path to the
// base64 of text.
func caBundlePatch(path, text string) client.Patch {
	return jsonPatch(`[{"op":"add","path":"` + path + `","value":"` + base64.StdEncoding.EncodeToString([]byte(text)) + `"}]`)
}

func jsonPatch(ops string) client.Patch { return client.RawPatch(types.JSONPatchType, []byte(ops)) }

// mergePatch is a JSON merge patch of body.
func mergePatch(body string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(body)) }

// RBAC cannot narrow bundle-operator's patch on webhook configurations,
// APIServices and CRDs to their caBundle fields, so its service account
// token could redirect the cluster's admission webhooks and aggregated
// APIs. The policy in config/rbac holds the account to what injection does.
var _ = Describe("The injection policy: bundle-operator's service account changes only the caBundles of annotated objects", Ordered, func() {
	var asOperator client.Client
	var objs []injectable

	BeforeAll(func(ctx context.Context) {
		var cfg *rest.Config
		cfg, asOperator = operatorUnderInjectionPolicy(ctx)

		DeferCleanup(func(ctx context.Context) {
			for _, o := range objs {
				Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, o.obj.DeepCopy()))).To(Succeed())
			}
		})

		By("the operator runs as its service account under the policy")
		runManagerAs(cfg, spireSrv.SocketPath)
	})

	It("admits the operator's injection into every kind", func(ctx context.Context) {
		ca := testpki.ValidCA("inject-policy")
		tb := newTrustBundle(unique("inject-policy"), inline(ca.PEM()))
		tb.Spec.Target = v1alpha1.Target{}
		want := base64.StdEncoding.EncodeToString([]byte(pemOf(ca.PEM())))
		objs = []injectable{
			webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("vwc-policy"), tb.Name),
			webhookConfig(target.MutatingWebhookConfigurationGVK, unique("mwc-policy"), tb.Name),
			apiService(unique("apis-policy"), tb.Name),
			conversionCRD(unique("policyconvs")+"s", tb.Name),
		}
		for _, o := range objs {
			Expect(cp.Client.Create(ctx, o.obj.DeepCopy())).To(Succeed())
		}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		for _, o := range objs {
			Eventually(func() []string { return caBundles(ctx, o) }).Should(HaveEach(want), o.obj.GetKind())
		}
	})

	It("refuses, from the operator's service account, every other change of an annotated object and any change of another", func(ctx context.Context) {
		vwc, mwc, apis, crd := objs[0].obj, objs[1].obj, objs[2].obj, objs[3].obj
		for what, c := range map[string]struct {
			obj   *unstructured.Unstructured
			patch client.Patch
		}{
			"a webhook's URL":             {vwc, jsonPatch(`[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://attacker.invalid/hook"}]`)},
			"a webhook's failure policy":  {mwc, jsonPatch(`[{"op":"replace","path":"/webhooks/1/failurePolicy","value":"Fail"}]`)},
			"a webhook's rules":           {vwc, jsonPatch(`[{"op":"add","path":"/webhooks/0/rules","value":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*"]}]}]`)},
			"a webhook's name":            {vwc, jsonPatch(`[{"op":"replace","path":"/webhooks/1/name","value":"third.example.com"}]`)},
			"a webhook removed":           {mwc, jsonPatch(`[{"op":"remove","path":"/webhooks/1"}]`)},
			"the webhooks' order":         {mwc, jsonPatch(`[{"op":"move","from":"/webhooks/1","path":"/webhooks/0"}]`)},
			"the inject annotation":       {vwc, jsonPatch(`[{"op":"remove","path":"/metadata/annotations"}]`)},
			"a label":                     {mwc, jsonPatch(`[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`)},
			"an APIService's service":     {apis, jsonPatch(`[{"op":"replace","path":"/spec/service/name","value":"attacker"}]`)},
			"an APIService's TLS check":   {apis, jsonPatch(`[{"op":"remove","path":"/spec/caBundle"},{"op":"add","path":"/spec/insecureSkipTLSVerify","value":true}]`)},
			"a CRD's schema":              {crd, jsonPatch(`[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-preserve-unknown-fields","value":true}]`)},
			"a CRD's conversion endpoint": {crd, jsonPatch(`[{"op":"replace","path":"/spec/conversion/webhook/clientConfig/url","value":"https://attacker.invalid/convert"}]`)},
		} {
			err := asOperator.Patch(ctx, c.obj.DeepCopy(), c.patch)
			Expect(err).To(MatchError(ContainSubstring("bundle-operator changes only")), what)
		}

		By("an object not annotated for injection keeps even its caBundle")
		plain := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("vwc-plain"), "")
		plain.obj.SetAnnotations(nil)
		Expect(cp.Client.Create(ctx, plain.obj.DeepCopy())).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(cp.Client.Delete(ctx, plain.obj.DeepCopy())).To(Succeed()) })
		Expect(asOperator.Patch(ctx, plain.obj.DeepCopy(), caBundlePatch("/webhooks/0/clientConfig/caBundle", "x"))).
			To(MatchError(ContainSubstring("only objects annotated")))

		By("while a caBundle of an annotated object may change, as the operator applies it")
		another := base64.StdEncoding.EncodeToString([]byte(testpki.ValidCA("another").PEM()))
		apply := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"conversion": map[string]any{
			"webhook": map[string]any{"clientConfig": map[string]any{"caBundle": another}}}}}}
		apply.SetGroupVersionKind(crd.GroupVersionKind())
		apply.SetName(crd.GetName())
		Expect(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(target.FieldManager), client.ForceOwnership)).To(Succeed())
	})
})
