package controller_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// An attack review of the injection policy: with bundle-operator's service
// account token, anything beyond setting the caBundle of annotated objects.
// Each spec asserts the safe behaviour. The objects are annotated for a
// TrustBundle that does not exist, so the suite's operator leaves them alone.
var _ = Describe("Adversarial: the injection policy against bundle-operator's stolen token", Ordered, ContinueOnFailure, func() {
	var asOperator client.Client
	var vwc, mwc, apis, crd injectable
	const noBundle = "inj-adv-no-such-bundle"

	create := func(ctx context.Context, o injectable) {
		Expect(cp.Client.Create(ctx, o.obj.DeepCopy())).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, o.obj.DeepCopy()))).To(Succeed())
		})
	}
	live := func(ctx context.Context, o injectable) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.obj.GroupVersionKind())
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: o.obj.GetName()}, u)).To(Succeed())
		return u
	}
	denied := func(err error, what string) {
		ExpectWithOffset(1, err).To(MatchError(ContainSubstring("bundle-operator changes only")), what)
	}

	BeforeAll(func(ctx context.Context) {
		_, asOperator = operatorUnderInjectionPolicy(ctx)
		vwc = webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("inj-adv-vwc"), noBundle)
		mwc = webhookConfig(target.MutatingWebhookConfigurationGVK, unique("inj-adv-mwc"), noBundle)
		apis = apiService(unique("injadvapis"), noBundle)
		crd = conversionCRD(unique("injadvconvs")+"s", noBundle)
		for _, o := range []injectable{vwc, mwc, apis, crd} {
			create(ctx, o)
		}
	})

	It("resists: every other webhook field (service, selectors, matchConditions, timeout, sideEffects, review versions, matchPolicy, reinvocation)", func(ctx context.Context) {
		for what, c := range map[string]struct {
			o     injectable
			patch string
		}{
			"url to service":          {vwc, `[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"service":{"namespace":"default","name":"attacker","port":443}}}]`},
			"namespaceSelector":       {vwc, `[{"op":"replace","path":"/webhooks/0/namespaceSelector","value":{"matchLabels":{"never":"x"}}}]`},
			"objectSelector":          {vwc, `[{"op":"replace","path":"/webhooks/0/objectSelector","value":{"matchLabels":{"never":"x"}}}]`},
			"matchConditions":         {vwc, `[{"op":"add","path":"/webhooks/0/matchConditions","value":[{"name":"never","expression":"false"}]}]`},
			"timeoutSeconds":          {vwc, `[{"op":"replace","path":"/webhooks/0/timeoutSeconds","value":1}]`},
			"sideEffects":             {vwc, `[{"op":"replace","path":"/webhooks/0/sideEffects","value":"NoneOnDryRun"}]`},
			"admissionReviewVersions": {vwc, `[{"op":"replace","path":"/webhooks/0/admissionReviewVersions","value":["v1beta1"]}]`},
			"matchPolicy":             {vwc, `[{"op":"replace","path":"/webhooks/0/matchPolicy","value":"Exact"}]`},
			"reinvocationPolicy":      {mwc, `[{"op":"replace","path":"/webhooks/0/reinvocationPolicy","value":"IfNeeded"}]`},
			"failurePolicy of second": {mwc, `[{"op":"replace","path":"/webhooks/1/failurePolicy","value":"Fail"}]`},
		} {
			denied(asOperator.Patch(ctx, c.o.obj.DeepCopy(), jsonPatch(c.patch)), what)
		}
	})

	It("resists: merge patch with nulls and forced server-side apply", func(ctx context.Context) {
		// A merge patch replaces the whole list; nulls drop fields to their defaults.
		merge := `{"webhooks":[{"name":"first.example.com","clientConfig":{"url":"https://webhook.invalid/hook"},"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":null},` +
			`{"name":"second.example.com","clientConfig":{"url":"https://webhook.invalid/hook"},"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":"Ignore"}]}`
		denied(asOperator.Patch(ctx, vwc.obj.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(merge))), "merge patch, failurePolicy null")
		denied(asOperator.Patch(ctx, apis.obj.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"service":null,"caBundle":null}}`))), "APIService made local")
		denied(asOperator.Patch(ctx, vwc.obj.DeepCopy(), client.RawPatch(types.StrategicMergePatchType,
			[]byte(`{"webhooks":[{"name":"first.example.com","clientConfig":{"url":"https://attacker.invalid/hook"}}]}`))), "strategic merge patch of the URL")

		apply := &unstructured.Unstructured{Object: map[string]any{"webhooks": []any{
			map[string]any{"name": "first.example.com", "timeoutSeconds": int64(1), "clientConfig": map[string]any{"url": "https://attacker.invalid/hook"}},
		}}}
		apply.SetGroupVersionKind(vwc.obj.GroupVersionKind())
		apply.SetName(vwc.obj.GetName())
		denied(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(target.FieldManager), client.ForceOwnership), "forced apply")
	})

	It("resists: every other APIService field", func(ctx context.Context) {
		for what, p := range map[string]string{
			"service port":         `[{"op":"replace","path":"/spec/service/port","value":8443}]`,
			"service namespace":    `[{"op":"replace","path":"/spec/service/namespace","value":"kube-system"}]`,
			"groupPriorityMinimum": `[{"op":"replace","path":"/spec/groupPriorityMinimum","value":20000}]`,
			"versionPriority":      `[{"op":"replace","path":"/spec/versionPriority","value":100}]`,
		} {
			denied(asOperator.Patch(ctx, apis.obj.DeepCopy(), jsonPatch(p)), what)
		}
	})

	It("resists: every other CRD field (names, versions, columns, subresources, conversion)", func(ctx context.Context) {
		for what, p := range map[string]string{
			"shortNames":               `[{"op":"add","path":"/spec/names/shortNames","value":["adv"]}]`,
			"categories":               `[{"op":"add","path":"/spec/names/categories","value":["all"]}]`,
			"printer columns":          `[{"op":"add","path":"/spec/versions/0/additionalPrinterColumns","value":[{"name":"x","type":"string","jsonPath":".metadata.name"}]}]`,
			"status subresource":       `[{"op":"add","path":"/spec/versions/0/subresources","value":{"status":{}}}]`,
			"deprecated":               `[{"op":"add","path":"/spec/versions/0/deprecated","value":true}]`,
			"another served version":   `[{"op":"add","path":"/spec/versions/-","value":{"name":"v2","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}]`,
			"conversionReviewVersions": `[{"op":"replace","path":"/spec/conversion/webhook/conversionReviewVersions","value":["v1beta1"]}]`,
			"conversion service":       `[{"op":"replace","path":"/spec/conversion/webhook/clientConfig","value":{"service":{"namespace":"default","name":"attacker","port":443}}}]`,
			"strategy None":            `[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}}]`,
		} {
			denied(asOperator.Patch(ctx, crd.obj.DeepCopy(), jsonPatch(p)), what)
		}
	})

	It("resists: metadata (annotation value, finalizer, dangling owner for the garbage collector)", func(ctx context.Context) {
		for what, p := range map[string]string{
			"annotation value": `[{"op":"replace","path":"/metadata/annotations","value":{"bundle.trustplane.dev/inject":"other"}}]`,
			"finalizer":        `[{"op":"add","path":"/metadata/finalizers","value":["adversarial.example.com/hold"]}]`,
			"owner":            `[{"op":"add","path":"/metadata/ownerReferences","value":[{"apiVersion":"v1","kind":"Namespace","name":"inj-adv-gone","uid":"00000000-0000-0000-0000-000000000001"}]}]`,
		} {
			Expect(asOperator.Patch(ctx, vwc.obj.DeepCopy(), jsonPatch(p))).To(MatchError(ContainSubstring("only objects annotated")), what)
		}
	})

	It("resists: annotating an unannotated object and changing it in the same write", func(ctx context.Context) {
		plain := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("inj-adv-plain"), "")
		plain.obj.SetAnnotations(nil)
		create(ctx, plain)
		Expect(asOperator.Patch(ctx, plain.obj.DeepCopy(), jsonPatch(`[{"op":"add","path":"/metadata/annotations","value":{"bundle.trustplane.dev/inject":"x"}},`+
			`{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://attacker.invalid/hook"}]`))).
			To(MatchError(ContainSubstring("only objects annotated")))
	})

	It("resists through RBAC: status subresources, delete, deletecollection, create by server-side apply", func(ctx context.Context) {
		st := apis.obj.DeepCopy()
		err := asOperator.Status().Patch(ctx, st, client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"Available","status":"False","reason":"Forged","message":"forged","lastTransitionTime":"2020-01-01T00:00:00Z"}]}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "apiservices/status: %v", err)
		err = asOperator.Status().Patch(ctx, crd.obj.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"storedVersions":["v1","v0"]}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "customresourcedefinitions/status: %v", err)

		for _, o := range []injectable{vwc, mwc, apis, crd} {
			err := asOperator.Delete(ctx, o.obj.DeepCopy())
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "delete %s: %v", o.obj.GetKind(), err)
			l := &unstructured.Unstructured{}
			l.SetGroupVersionKind(o.obj.GroupVersionKind())
			err = asOperator.DeleteAllOf(ctx, l)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deletecollection %s: %v", o.obj.GetKind(), err)
		}

		fresh := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("inj-adv-created"), "x")
		fresh.obj.Object["webhooks"].([]any)[0].(map[string]any)["clientConfig"] = map[string]any{"url": "https://attacker.invalid/hook"}
		err = asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(fresh.obj), client.FieldOwner(target.FieldManager), client.ForceOwnership)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "create by apply: %v", err)
		_ = cp.Client.Delete(ctx, fresh.obj.DeepCopy())
	})

	It("resists: another API version of admissionregistration (v1beta1 webhooks)", func(ctx context.Context) {
		u := vwc.obj.DeepCopy()
		u.SetAPIVersion("admissionregistration.k8s.io/v1beta1")
		err := asOperator.Patch(ctx, u, jsonPatch(`[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://attacker.invalid/hook"}]`))
		Expect(err).To(HaveOccurred())
		hook := live(ctx, vwc).Object["webhooks"].([]any)[0].(map[string]any)
		Expect(hook["clientConfig"].(map[string]any)["url"]).To(Equal("https://webhook.invalid/hook"))
	})

	// Holes, if any: these assert the safe behaviour.

	It("holds a configuration's webhook order (mutating webhooks run in list order)", func(ctx context.Context) {
		// The two webhooks differ only in name: the move changes nothing but the order.
		err := asOperator.Patch(ctx, mwc.obj.DeepCopy(), jsonPatch(`[{"op":"move","from":"/webhooks/1","path":"/webhooks/0"}]`))
		names := []string{}
		for _, w := range live(ctx, mwc).Object["webhooks"].([]any) {
			names = append(names, w.(map[string]any)["name"].(string))
		}
		GinkgoWriter.Printf("reorder: err=%v order=%v\n", err, names)
		Expect(names).To(Equal([]string{"first.example.com", "second.example.com"}), "webhook order changed by the operator's account")
	})

	It("holds metadata.generateName", func(ctx context.Context) {
		// An APIService's validation refuses any generateName; a webhook configuration's does not.
		for _, o := range []injectable{apis, vwc} {
			err := asOperator.Patch(ctx, o.obj.DeepCopy(), jsonPatch(`[{"op":"add","path":"/metadata/generateName","value":"inj-adv-"}]`))
			GinkgoWriter.Printf("generateName %s: err=%v now=%q\n", o.obj.GetKind(), err, live(ctx, o).GetGenerateName())
			Expect(live(ctx, o).GetGenerateName()).To(BeEmpty(), o.obj.GetKind())
		}
	})

	It("holds metadata.managedFields (no ownership planted in the operator's apply set)", func(ctx context.Context) {
		mf := fmt.Sprintf(`[{"op":"replace","path":"/metadata/managedFields","value":[{"manager":%q,"operation":"Apply","apiVersion":"admissionregistration.k8s.io/v1","fieldsType":"FieldsV1",`+
			`"fieldsV1":{"f:webhooks":{"k:{\"name\":\"first.example.com\"}":{".":{},"f:name":{},"f:failurePolicy":{},"f:clientConfig":{"f:caBundle":{}}}}}}]}]`, target.FieldManager)
		err := asOperator.Patch(ctx, vwc.obj.DeepCopy(), jsonPatch(mf))
		GinkgoWriter.Printf("managedFields rewrite: err=%v\n", err)
		for _, e := range live(ctx, vwc).GetManagedFields() {
			GinkgoWriter.Printf("  manager=%s op=%s fields=%s\n", e.Manager, e.Operation, string(e.FieldsV1.Raw))
		}
		Expect(err).To(HaveOccurred(), "the operator's account rewrote managedFields")
	})

	It("keeps the operator able to repair an attacker's caBundle (managedFields planted so its apply would drop a field)", func(ctx context.Context) {
		bundleName := unique("inj-adv-chain")
		obj := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("inj-adv-chain-vwc"), bundleName)
		create(ctx, obj)
		good := testpki.ValidCA("inj-adv-good")
		want := base64.StdEncoding.EncodeToString([]byte(good.PEM()))
		injector := &target.Injector{Cache: asOperator, Live: asOperator, Client: asOperator}

		By("the operator injects, under the policy")
		rep := injector.Sync(ctx, bundleName, []byte(good.PEM()))
		Expect(rep.FailedCount).To(BeZero(), "%v", rep.Failed)
		Expect(caBundles(ctx, obj)).To(HaveEach(want))

		By("with the stolen token: a caBundle the webhook's server cannot match (a failurePolicy Ignore webhook is then skipped), and the operator's apply set made to own failurePolicy alone")
		evil := base64.StdEncoding.EncodeToString([]byte(testpki.ValidCA("inj-adv-evil").PEM()))
		mf := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":%q},`+
			`{"op":"replace","path":"/metadata/managedFields","value":[{"manager":%q,"operation":"Apply","apiVersion":"admissionregistration.k8s.io/v1","fieldsType":"FieldsV1",`+
			`"fieldsV1":{"f:webhooks":{"k:{\"name\":\"first.example.com\"}":{".":{},"f:name":{},"f:failurePolicy":{},"f:clientConfig":{"f:caBundle":{}}},`+
			`"k:{\"name\":\"second.example.com\"}":{".":{},"f:name":{},"f:clientConfig":{"f:caBundle":{}}}}}}]}]`, evil, target.FieldManager)
		err := asOperator.Patch(ctx, obj.obj.DeepCopy(), jsonPatch(mf))
		GinkgoWriter.Printf("plant: err=%v\n", err)

		By("the token is revoked; the operator's next pass must restore the caBundle")
		rep = injector.Sync(ctx, bundleName, []byte(good.PEM()))
		GinkgoWriter.Printf("repair pass: failed=%v\n", rep.Failed)
		Expect(caBundles(ctx, obj)).To(HaveEach(want), "the attacker's caBundle survives the operator: %v", rep.Failed)
		Expect(rep.FailedCount).To(BeZero(), "%v", rep.Failed)
	})

	// Regressions: the operator's own injection must still pass.

	It("admits the operator's injection into a webhook configuration of 150 webhooks with rules, selectors and matchConditions", func(ctx context.Context) {
		bundleName := unique("inj-adv-big")
		obj := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("inj-adv-big-vwc"), bundleName)
		var hooks []any
		for i := range 150 {
			hooks = append(hooks, map[string]any{
				"name":                    fmt.Sprintf("h%03d.example.com", i),
				"clientConfig":            map[string]any{"service": map[string]any{"namespace": "default", "name": "hook", "path": fmt.Sprintf("/h%d", i)}},
				"sideEffects":             "None",
				"failurePolicy":           "Ignore",
				"admissionReviewVersions": []any{"v1"},
				"rules": []any{
					map[string]any{"apiGroups": []any{"", "apps", "batch"}, "apiVersions": []any{"*"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"pods", "deployments", "jobs", "cronjobs"}},
					map[string]any{"apiGroups": []any{"networking.k8s.io"}, "apiVersions": []any{"v1"}, "operations": []any{"*"}, "resources": []any{"ingresses", "networkpolicies"}},
				},
				"namespaceSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": []any{"kube-system", "kube-public"}}}},
				"objectSelector":    map[string]any{"matchLabels": map[string]any{"app": fmt.Sprintf("a%d", i)}},
				"matchConditions": []any{
					map[string]any{"name": "not-node", "expression": "!request.userInfo.username.startsWith('system:node:')"},
					map[string]any{"name": "not-sa", "expression": "request.userInfo.username != 'system:serviceaccount:kube-system:x'"},
				},
			})
		}
		obj.obj.Object["webhooks"] = hooks
		obj.paths = [][]string{{"webhooks", "0", "clientConfig", "caBundle"}}
		create(ctx, obj)
		ca := testpki.ValidCA("inj-adv-big")
		rep := (&target.Injector{Cache: asOperator, Live: asOperator, Client: asOperator}).Sync(ctx, bundleName, []byte(ca.PEM()))
		Expect(rep.FailedCount).To(BeZero(), "%v", rep.Failed)
		Expect(caBundles(ctx, obj)).To(HaveEach(base64.StdEncoding.EncodeToString([]byte(ca.PEM()))))
	})

	It("admits the operator's injection into a CRD with a large schema and several versions", func(ctx context.Context) {
		bundleName := unique("inj-adv-bigcrd")
		obj := conversionCRD(unique("injadvbigs")+"s", bundleName)
		props := map[string]any{}
		for i := range 2500 {
			props[fmt.Sprintf("field%04d", i)] = map[string]any{
				"type": "string", "description": strings.Repeat("a description of this field. ", 6),
				"enum": []any{"a", "b", "c"}, "default": "a",
			}
		}
		schema := map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
			"spec": map[string]any{"type": "object", "properties": props},
		}}}
		var versions []any
		for i, v := range []string{"v1", "v2", "v3"} {
			versions = append(versions, map[string]any{
				"name": v, "served": true, "storage": i == 0, "schema": schema,
				"subresources":             map[string]any{"status": map[string]any{}},
				"additionalPrinterColumns": []any{map[string]any{"name": "F", "type": "string", "jsonPath": ".spec.field0001"}},
			})
		}
		Expect(unstructured.SetNestedSlice(obj.obj.Object, versions, "spec", "versions")).To(Succeed())
		create(ctx, obj)
		ca := testpki.ValidCA("inj-adv-bigcrd")
		rep := (&target.Injector{Cache: asOperator, Live: asOperator, Client: asOperator}).Sync(ctx, bundleName, []byte(ca.PEM()))
		Expect(rep.FailedCount).To(BeZero(), "%v", rep.Failed)
		Expect(caBundles(ctx, obj)).To(HaveEach(base64.StdEncoding.EncodeToString([]byte(ca.PEM()))))
	})

	It("admits the operator's injection after another writer (cert-manager style update) set the caBundle, and a webhook was added", func(ctx context.Context) {
		bundleName := unique("inj-adv-shared")
		obj := webhookConfig(target.MutatingWebhookConfigurationGVK, unique("inj-adv-shared-mwc"), bundleName)
		create(ctx, obj)
		injector := &target.Injector{Cache: asOperator, Live: asOperator, Client: asOperator}
		ca := testpki.ValidCA("inj-adv-shared")
		Expect(injector.Sync(ctx, bundleName, []byte(ca.PEM())).FailedCount).To(BeZero())

		u := live(ctx, obj)
		hooks := u.Object["webhooks"].([]any)
		hooks[0].(map[string]any)["clientConfig"].(map[string]any)["caBundle"] = base64.StdEncoding.EncodeToString([]byte(testpki.ValidCA("other-writer").PEM()))
		third := map[string]any{"name": "third.example.com", "clientConfig": map[string]any{"url": "https://webhook.invalid/3"},
			"sideEffects": "None", "failurePolicy": "Ignore", "admissionReviewVersions": []any{"v1"}}
		u.Object["webhooks"] = append(hooks, third)
		Expect(cp.Client.Update(ctx, u, client.FieldOwner("cainjector"))).To(Succeed())

		rep := injector.Sync(ctx, bundleName, []byte(ca.PEM()))
		Expect(rep.FailedCount).To(BeZero(), "%v", rep.Failed)
		obj.paths = append(obj.paths, []string{"webhooks", "2", "clientConfig", "caBundle"})
		Expect(caBundles(ctx, obj)).To(HaveEach(base64.StdEncoding.EncodeToString([]byte(ca.PEM()))))
	})

	It("admits the operator's injection into an annotated object while it is being deleted behind a finalizer", func(ctx context.Context) {
		// The operator skips objects with a deletionTimestamp in its
		// cache; a stale cache can still write one. Only informational.
		bundleName := unique("inj-adv-deleting")
		obj := apiService(unique("injadvdel"), bundleName)
		obj.obj.SetFinalizers([]string{"adversarial.example.com/hold"})
		Expect(cp.Client.Create(ctx, obj.obj.DeepCopy())).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			_ = cp.Client.Patch(ctx, obj.obj.DeepCopy(), jsonPatch(`[{"op":"remove","path":"/metadata/finalizers"}]`))
		})
		Expect(cp.Client.Delete(ctx, obj.obj.DeepCopy())).To(Succeed())
		err := asOperator.Patch(ctx, obj.obj.DeepCopy(), caBundlePatch("/spec/caBundle", testpki.ValidCA("inj-adv-del").PEM()))
		GinkgoWriter.Printf("write while deleting: %v\n", err)
		Expect(err).NotTo(HaveOccurred())
	})
})
