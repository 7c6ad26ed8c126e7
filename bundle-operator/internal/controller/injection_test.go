package controller_test

import (
	"context"
	"encoding/base64"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// injectable is one object of an injection kind and the path(s) of its caBundle.
type injectable struct {
	obj   *unstructured.Unstructured
	paths [][]string
}

func webhookConfig(gvk schema.GroupVersionKind, name, bundleName string) injectable {
	none := admissionv1.SideEffectClassNone
	ignore := admissionv1.Ignore
	url := "https://webhook.invalid/hook"
	hook := map[string]any{
		"clientConfig":            map[string]any{"url": url},
		"sideEffects":             string(none),
		"failurePolicy":           string(ignore),
		"admissionReviewVersions": []any{"v1"},
	}
	first, second := map[string]any{"name": "first.example.com"}, map[string]any{"name": "second.example.com"}
	for k, v := range hook {
		first[k], second[k] = v, v
	}
	u := &unstructured.Unstructured{Object: map[string]any{"webhooks": []any{first, second}}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	u.SetAnnotations(map[string]string{v1alpha1.InjectAnnotation: bundleName})
	return injectable{obj: u, paths: [][]string{{"webhooks", "0", "clientConfig", "caBundle"}, {"webhooks", "1", "clientConfig", "caBundle"}}}
}

func apiService(name, bundleName string) injectable {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"group": name + ".example.com", "version": "v1alpha1",
		"service":              map[string]any{"namespace": "default", "name": "nothing", "port": int64(443)},
		"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
	}}}
	u.SetGroupVersionKind(target.APIServiceGVK)
	u.SetName("v1alpha1." + name + ".example.com")
	u.SetAnnotations(map[string]string{v1alpha1.InjectAnnotation: bundleName})
	return injectable{obj: u, paths: [][]string{{"spec", "caBundle"}}}
}

func conversionCRD(plural, bundleName string) injectable {
	group := "conv.example.com"
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"group": group,
		"names": map[string]any{"plural": plural, "singular": plural[:len(plural)-1], "kind": "Conv" + plural[:len(plural)-1], "listKind": "Conv" + plural[:len(plural)-1] + "List"},
		"scope": "Namespaced",
		"versions": []any{map[string]any{
			"name": "v1", "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object"}},
		}},
		"conversion": map[string]any{
			"strategy": "Webhook",
			"webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				"clientConfig":             map[string]any{"url": "https://webhook.invalid/convert"},
			},
		},
	}}}
	u.SetGroupVersionKind(target.CustomResourceDefinitionGVK)
	u.SetName(plural + "." + group)
	u.SetAnnotations(map[string]string{v1alpha1.InjectAnnotation: bundleName})
	return injectable{obj: u, paths: [][]string{{"spec", "conversion", "webhook", "clientConfig", "caBundle"}}}
}

// caBundles reads every caBundle of the live object.
func caBundles(ctx context.Context, in injectable) []string {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(in.obj.GroupVersionKind())
	Expect(cp.Client.Get(ctx, client.ObjectKey{Name: in.obj.GetName()}, live)).To(Succeed())
	var out []string
	for _, p := range in.paths {
		out = append(out, nestedString(live.Object, p))
	}
	return out
}

// nestedString follows a path of map keys and slice indexes.
func nestedString(obj any, path []string) string {
	cur := obj
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i := int(p[0] - '0')
			if i >= len(c) {
				return ""
			}
			cur = c[i]
		default:
			return ""
		}
	}
	s, _ := cur.(string)
	return s
}

var _ = Describe("Injection into annotated webhooks, APIServices and CRDs", func() {
	It("sets every caBundle of the four kinds and repairs a hand edit", func(ctx context.Context) {
		ca := testpki.ValidCA("inject")
		tb := newTrustBundle(unique("inject"), inline(ca.PEM()))
		tb.Spec.Target = v1alpha1.Target{}
		want := base64.StdEncoding.EncodeToString([]byte(pemOf(ca.PEM())))
		objs := []injectable{
			webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("vwc"), tb.Name),
			webhookConfig(target.MutatingWebhookConfigurationGVK, unique("mwc"), tb.Name),
			apiService(unique("apis"), tb.Name),
			conversionCRD(unique("convs")+"s", tb.Name),
		}
		for _, o := range objs {
			Expect(cp.Client.Create(ctx, o.obj.DeepCopy())).To(Succeed())
			DeferCleanup(func(ctx context.Context) {
				Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, o.obj.DeepCopy()))).To(Succeed())
			})
		}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		for _, o := range objs {
			Eventually(func() []string { return caBundles(ctx, o) }).Should(HaveEach(want), o.obj.GetKind())
		}
		Eventually(func() int32 { return get(ctx, tb).Status.TargetsInSync }).Should(BeEquivalentTo(4))

		By("editing each caBundle by hand")
		other := base64.StdEncoding.EncodeToString([]byte(testpki.ValidCA("intruder").PEM()))
		for _, o := range objs {
			Eventually(func() error {
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(o.obj.GroupVersionKind())
				if err := cp.Client.Get(ctx, client.ObjectKey{Name: o.obj.GetName()}, live); err != nil {
					return err
				}
				setCABundle(live.Object, o.paths[0], other)
				return cp.Client.Update(ctx, live, client.FieldOwner("hand-edit"))
			}).Should(Succeed())
		}
		for _, o := range objs {
			Eventually(func() []string { return caBundles(ctx, o) }).Should(HaveEach(want), o.obj.GetKind())
		}
	})

	It("skips an annotated CRD without a conversion webhook with a Warning event, not a failed pass", func(ctx context.Context) {
		ca := testpki.ValidCA("skip")
		tb := newTrustBundle(unique("inject"), inline(ca.PEM()))
		tb.Spec.Target = v1alpha1.Target{}
		noWebhook := conversionCRD(unique("noconvs")+"s", tb.Name)
		Expect(unstructured.SetNestedMap(noWebhook.obj.Object, map[string]any{"strategy": "None"}, "spec", "conversion")).To(Succeed())
		api := apiService(unique("apis"), tb.Name)
		for _, o := range []injectable{noWebhook, api} {
			Expect(cp.Client.Create(ctx, o.obj.DeepCopy())).To(Succeed())
			DeferCleanup(func(ctx context.Context) {
				Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, o.obj.DeepCopy()))).To(Succeed())
			})
		}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() []string { return caBundles(ctx, api) }).Should(HaveEach(base64.StdEncoding.EncodeToString([]byte(ca.PEM()))))
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Consistently(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Eventually(func() []string {
			var l eventsv1.EventList
			Expect(cp.Client.List(ctx, &l)).To(Succeed())
			var notes []string
			for _, e := range l.Items {
				if e.Regarding.Name == tb.Name && e.Reason == "InjectionSkipped" && e.Type == "Warning" {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}).Should(ContainElement(ContainSubstring(noWebhook.obj.GetName())))
	})

	It("leaves objects annotated for another TrustBundle alone", func(ctx context.Context) {
		tb := newTrustBundle(unique("inject"), inline(testpki.ValidCA("mine").PEM()))
		tb.Spec.Target = v1alpha1.Target{}
		foreign := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("vwc"), "someone-elses")
		Expect(cp.Client.Create(ctx, foreign.obj.DeepCopy())).To(Succeed())
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Consistently(func() []string { return caBundles(ctx, foreign) }).Should(HaveEach(""))
	})
})

func setCABundle(obj map[string]any, path []string, value string) {
	cur := any(obj)
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = value
				return
			}
			cur = c[p]
		case []any:
			cur = c[int(p[0]-'0')]
		}
	}
}
