package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

var _ = Describe("Pool change: a pool change requeues the bindings that reference it", func() {
	It("updates the output when the InferencePool selector changes", func(ctx context.Context) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, inferencePool(ns, "llm", map[string]any{"app": "llm"}))).To(Succeed())
		b := createBinding(ctx, ns, "llm", "serving", "v1", withPool("", "", "llm"))
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		Expect(getEntry(ctx, ns, b.Name)(Default).Spec.Selectors).To(ContainElement("k8s:pod-label:app:llm"))

		Eventually(func(g Gomega) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(pool.InferencePoolGVK())
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llm"}, u)).To(Succeed())
			g.Expect(unstructured.SetNestedStringMap(u.Object, map[string]string{"app": "llm-v2"}, "spec", "selector", "matchLabels")).To(Succeed())
			g.Expect(k8s.Update(ctx, u)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) []string { return getEntry(ctx, ns, b.Name)(g).Spec.Selectors }).Should(And(
			ContainElement("k8s:pod-label:app:llm-v2"), Not(ContainElement("k8s:pod-label:app:llm"))))
		Eventually(func(g Gomega) []string { return getBinding(ctx, ns, b.Name)(g).Status.Selectors }).Should(ContainElement("k8s:pod-label:app:llm-v2"))
	}, SpecTimeout(time.Minute))
})
