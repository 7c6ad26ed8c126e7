package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

var _ = Describe("Fallback policies", func() {
	It("register a workload only while no other policy selects it", func() {
		namespace("fallback-a", map[string]string{"test": "fallback"})
		deployment("fallback-a", "web", "web", map[string]string{"app": "web"})
		deployment("fallback-a", "batch", "batch", map[string]string{"app": "batch"})
		fb := policyFor("fallback", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Fallback = true
			s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
		})
		Expect(k8s.Create(ctx, fb)).To(Succeed())
		Eventually(paths(parentOf("fallback"))).Should(Equal([]string{"/fallback/ns/fallback-a/sa/batch", "/fallback/ns/fallback-a/sa/web"}))

		// A policy selecting web takes it from the fallback.
		main := policyFor("fallback-main", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.NamespaceSelector.MatchLabels["test"] = "fallback"
			s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		})
		Expect(k8s.Create(ctx, main)).To(Succeed())
		Eventually(paths(parentOf("fallback-main"))).Should(Equal([]string{"/ns/fallback-a/sa/web"}))
		Eventually(paths(parentOf("fallback"))).Should(Equal([]string{"/fallback/ns/fallback-a/sa/batch"}))
		Eventually(func() int32 {
			policyReady(fb)()
			return fb.Status.WorkloadsSelected
		}).Should(BeEquivalentTo(1))

		// Another fallback policy is not one to yield to.
		fb2 := policyFor("fallback-2", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Fallback = true
			s.NamespaceSelector.MatchLabels["test"] = "fallback"
		})
		Expect(k8s.Create(ctx, fb2)).To(Succeed())
		Eventually(paths(parentOf("fallback-2"))).Should(Equal([]string{"/ns/fallback-a/sa/batch"}))
		Consistently(paths(parentOf("fallback")), resync).Should(Equal([]string{"/fallback/ns/fallback-a/sa/batch"}))

		// The policy goes: the fallback takes web back.
		Expect(k8s.Delete(ctx, main)).To(Succeed())
		Eventually(paths(parentOf("fallback"))).Should(Equal([]string{"/fallback/ns/fallback-a/sa/batch", "/fallback/ns/fallback-a/sa/web"}))
	})
})
