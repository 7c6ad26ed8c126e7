package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// service creates a Service of namespace ns selecting selector.
func service(ns, name string, selector map[string]string) *corev1.Service {
	GinkgoHelper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Port: 80}}}}
	Expect(k8s.Create(ctx, s)).To(Succeed())
	return s
}

// dnsNamesAt returns the DNS names of the entry at path under parent.
func dnsNamesAt(parent, path string) func() []string {
	return func() []string {
		if e := entryAt(parent, path); e != nil {
			return e.DnsNames
		}
		return []string{"absent"}
	}
}

var _ = Describe("autoPopulateDNSNames", func() {
	It("adds the names of the Services selecting the workload's pods, and follows Services as they come and go, "+
		"keeping the entry's ID", func() {
		namespace("autodns-a", map[string]string{"test": "autodns"})
		deployment("autodns-a", "web", "web", map[string]string{"app": "web", "tier": "fe"})
		svc := service("autodns-a", "web", map[string]string{"app": "web"})
		service("autodns-a", "api", map[string]string{"app": "api"})
		service("autodns-a", "narrow", map[string]string{"app": "web", "track": "canary"})
		// No selector: it selects no pods by itself.
		service("autodns-a", "manual", nil)
		p := policyFor("autodns", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.AutoPopulateDNSNames = true
			s.DNSNameTemplates = []string{"{serviceAccount}.internal"}
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(dnsNamesAt(parentOf("autodns"), "/ns/autodns-a/sa/web")).Should(Equal([]string{"web.autodns-a.svc", "web.internal"}))
		id := entryAt(parentOf("autodns"), "/ns/autodns-a/sa/web").Id

		service("autodns-a", "web-alt", map[string]string{"tier": "fe"})
		Eventually(dnsNamesAt(parentOf("autodns"), "/ns/autodns-a/sa/web")).Should(Equal(
			[]string{"web-alt.autodns-a.svc", "web.autodns-a.svc", "web.internal"}))
		Expect(k8s.Delete(ctx, svc)).To(Succeed())
		Eventually(dnsNamesAt(parentOf("autodns"), "/ns/autodns-a/sa/web")).Should(Equal([]string{"web-alt.autodns-a.svc", "web.internal"}))
		Expect(entryAt(parentOf("autodns"), "/ns/autodns-a/sa/web").Id).To(Equal(id))
	})

	It("adds, in a policy of pods, the names of the Services selecting each pod", func() {
		namespace("autodns-pods", map[string]string{"test": "autodns-pods"})
		createSA("autodns-pods", "batch")
		podOn("autodns-pods", "job-1", "batch", "", map[string]string{"spiffe": "on", "app": "job"}, nil)
		service("autodns-pods", "job", map[string]string{"app": "job"})
		p := podSelectorPolicy("autodns-pods", map[string]string{"spiffe": "on"}, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.AutoPopulateDNSNames = true
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(dnsNamesAt(parentOf("autodns-pods"), "/ns/autodns-pods/sa/batch")).Should(Equal([]string{"job.autodns-pods.svc"}))
	})
})
