package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

	It("keep a workload another policy selects but cannot render, until it renders there", func() {
		namespace("fallback-r", map[string]string{"test": "fallback-r"})
		web := deployment("fallback-r", "web", "web", nil)
		fb := policyFor("fallback-r", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Fallback = true
			s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
		})
		Expect(k8s.Create(ctx, fb)).To(Succeed())
		Eventually(paths(parentOf("fallback-r"))).Should(Equal([]string{"/fallback/ns/fallback-r/sa/web"}))

		// main selects web, but its template names a label web lacks: it
		// renders nothing for web, and web keeps the fallback's identity.
		main := policyFor("fallback-r-main", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.NamespaceSelector.MatchLabels["test"] = "fallback-r"
			s.SpiffeIDTemplate = "ns/{namespace}/team/{label:team}"
		})
		Expect(k8s.Create(ctx, main)).To(Succeed())
		Eventually(func() []v1alpha1.Failure {
			policyReady(main)()
			return main.Status.Failures
		}).Should(ContainElement(HaveField("Object", "Deployment fallback-r/web")))
		Consistently(paths(parentOf("fallback-r")), resync).Should(Equal([]string{"/fallback/ns/fallback-r/sa/web"}))

		// A workload main cannot render either, created after main's pass.
		deployment("fallback-r", "api", "api", nil)
		Eventually(paths(parentOf("fallback-r"))).Should(Equal([]string{"/fallback/ns/fallback-r/sa/api", "/fallback/ns/fallback-r/sa/web"}))

		// web gets the label: it moves to main.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
		web.Labels["team"] = "pay"
		Expect(k8s.Update(ctx, web)).To(Succeed())
		Eventually(paths(parentOf("fallback-r-main"))).Should(Equal([]string{"/ns/fallback-r/team/pay"}))
		Eventually(paths(parentOf("fallback-r"))).Should(Equal([]string{"/fallback/ns/fallback-r/sa/api"}))
	})

	It("register a pod that a policy of pods leaves out for its service account", func() {
		namespace("fallback-pods", map[string]string{"test": "fallback-pods"})
		createSA("fallback-pods", "ops")
		createSA("fallback-pods", "other")
		on := map[string]string{"role": "ops"}
		podOn("fallback-pods", "ops", "ops", "", on, nil)
		podOn("fallback-pods", "other", "other", "", on, nil)
		main := podSelectorPolicy("fallback-pods-main", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.NamespaceSelector.MatchLabels["test"] = "fallback-pods"
			s.ServiceAccountName = "ops"
			s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}"
		})
		Expect(k8s.Create(ctx, main)).To(Succeed())
		fb := podSelectorPolicy("fallback-pods", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Fallback = true
			s.SpiffeIDTemplate = "fallback/ns/{namespace}/pod/{podName}"
		})
		Expect(k8s.Create(ctx, fb)).To(Succeed())
		Eventually(paths(parentOf("fallback-pods-main"))).Should(Equal([]string{"/ns/fallback-pods/pod/ops"}))
		// The pod of the other account is not the main policy's: the
		// fallback registers it, and only it.
		Eventually(paths(parentOf("fallback-pods"))).Should(Equal([]string{"/fallback/ns/fallback-pods/pod/other"}))
		Consistently(paths(parentOf("fallback-pods")), resync).Should(HaveLen(1))
	})
})
