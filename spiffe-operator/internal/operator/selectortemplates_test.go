package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

var _ = Describe("Workload selector templates", func() {
	It("add the rendered attestor selectors to each entry, fail only the workload whose render fails, "+
		"and keep per-node entries coming", func() {
		namespace("seltpl-a", map[string]string{"test": "seltpl"})
		createSA("seltpl-a", "web")
		createSA("seltpl-a", "api")
		deployment("seltpl-a", "web", "web", map[string]string{"app": "web", "tier": "fe"})
		deployment("seltpl-a", "api", "api", map[string]string{"app": "api"})
		n := createNode("seltpl-1")
		podOn("seltpl-a", "web-1", "web", n.Name, map[string]string{"app": "web", "tier": "fe"}, nil)
		tpls := []string{"k8s:container-name:app", "k8s:pod-label:tier:{label:tier}"}

		fixed := policyFor("seltpl", func(s *v1alpha1.SpiffeRegistrationSpec) { s.WorkloadSelectorTemplates = tpls })
		Expect(k8s.Create(ctx, fixed)).To(Succeed())
		Eventually(paths(parentOf("seltpl"))).Should(Equal([]string{"/ns/seltpl-a/sa/web"}))
		Expect(selectorsOf(entryAt(parentOf("seltpl"), "/ns/seltpl-a/sa/web"))).To(Equal([]string{
			"k8s:container-name:app", "k8s:ns:seltpl-a", "k8s:pod-label:tier:fe", "k8s:sa:web"}))
		// api has no tier label: it alone fails, naming the template.
		Eventually(policyReady(fixed)).Should(Equal("False/InvalidWorkloadSelectorTemplate"))
		Expect(fixed.Status.Failures).To(HaveLen(1))
		Expect(fixed.Status.Failures[0].Object).To(Equal("Deployment seltpl-a/api"))
		Expect(fixed.Status.Failures[0].Message).To(ContainSubstring("spec.workloadSelectorTemplates[1]"))

		perNode := perNodePolicy("seltpl-node", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.WorkloadSelectorTemplates = tpls[:1]
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "seltpl"}}
		})
		Expect(k8s.Create(ctx, perNode)).To(Succeed())
		Eventually(paths(agentOf(n))).Should(Equal([]string{"/ns/seltpl-a/sa/web"}))
		Expect(selectorsOf(entryAt(agentOf(n), "/ns/seltpl-a/sa/web"))).To(Equal([]string{
			"k8s:container-name:app", "k8s:ns:seltpl-a", "k8s:sa:web"}))
	})

	It("are refused at admission unless they are k8s attestor selectors a workload policy may add", func() {
		for _, tpl := range []string{"unix:uid:0", "k8s:ns:kube-system", "k8s:sa:admin", "k8s:pod-uid:0000", "k8s:pod-name:x",
			"k8s:container-name:{pod}", "k8s:container-name:a b"} {
			p := policyFor("seltpl-bad", func(s *v1alpha1.SpiffeRegistrationSpec) { s.WorkloadSelectorTemplates = []string{tpl} })
			Expect(k8s.Create(ctx, p)).To(MatchError(ContainSubstring("workloadSelectorTemplates")), tpl)
		}
	})
})
