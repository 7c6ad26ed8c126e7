package operator_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
)

// registrationCRD is the SpiffeRegistration CRD as the API server serves it.
func registrationCRD() *unstructured.Unstructured {
	GinkgoHelper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	Expect(k8s.Get(ctx, client.ObjectKey{Name: "spifferegistrations.spiffe.trustplane.dev"}, crd)).To(Succeed())
	return crd
}

// withoutSpecRule returns crd without the spec-level CEL rules whose text
// contains part, as the CRD was before the rule was added.
func withoutSpecRule(crd *unstructured.Unstructured, part string) *unstructured.Unstructured {
	GinkgoHelper()
	out := crd.DeepCopy()
	versions, _, err := unstructured.NestedSlice(out.Object, "spec", "versions")
	Expect(err).NotTo(HaveOccurred())
	removed := 0
	for i := range versions {
		v := versions[i].(map[string]any)
		path := []string{"schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations"}
		rules, _, err := unstructured.NestedSlice(v, path...)
		Expect(err).NotTo(HaveOccurred())
		var kept []any
		for _, r := range rules {
			if strings.Contains(r.(map[string]any)["rule"].(string), part) {
				removed++
				continue
			}
			kept = append(kept, r)
		}
		Expect(unstructured.SetNestedSlice(v, kept, path...)).To(Succeed())
		versions[i] = v
	}
	Expect(removed).To(BeNumerically(">", 0), "no rule containing %q", part)
	Expect(unstructured.SetNestedSlice(out.Object, versions, "spec", "versions")).To(Succeed())
	return out
}

// bothSelectors is a policy of pods that also sets workloadSelector.
func bothSelectors(name string) *v1alpha1.SpiffeRegistration {
	return policyFor(name, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}}
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}}
	})
}

var _ = Describe("A SpiffeRegistration stored before a CEL rule", func() {
	It("that sets both podSelector and workloadSelector is refused by the operator with a named condition", func() {
		const rule = "!(has(self.podSelector) && has(self.workloadSelector))"
		current := registrationCRD()
		Expect(k8s.Create(ctx, bothSelectors("bothsel-probe"), client.DryRunAll)).NotTo(Succeed())

		By("the CRD as it was before the rule stores the object")
		older := withoutSpecRule(current, rule)
		Expect(k8s.Update(ctx, older)).To(Succeed())
		DeferCleanup(func() {
			crd := registrationCRD()
			restored := current.DeepCopy()
			restored.SetResourceVersion(crd.GetResourceVersion())
			Expect(k8s.Update(ctx, restored)).To(Succeed())
			Eventually(func() error {
				return k8s.Create(ctx, bothSelectors("bothsel-probe"), client.DryRunAll)
			}).ShouldNot(Succeed())
		})
		p := bothSelectors("bothsel")
		Eventually(func() error { return k8s.Create(ctx, p) }).Should(Succeed())

		By("with the rule back, the stored object is still read, and the operator refuses it")
		crd := registrationCRD()
		restored := current.DeepCopy()
		restored.SetResourceVersion(crd.GetResourceVersion())
		Expect(k8s.Update(ctx, restored)).To(Succeed())
		Eventually(func() error {
			return k8s.Create(ctx, bothSelectors("bothsel-probe"), client.DryRunAll)
		}).ShouldNot(Succeed())
		Eventually(policyReady(p)).Should(Equal("False/" + spifferegistration.ReasonPodAndWorkloadSelector))
		Expect(entriesUnder(parentOf("bothsel"))).To(BeEmpty())
		Expect(k8s.Delete(ctx, p)).To(Succeed())
	})
})
