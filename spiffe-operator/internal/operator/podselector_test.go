package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// ownedBy makes a pod's controller kind/name (no controller-manager runs
// here to collect pods whose owner does not exist).
func ownedBy(apiVersion, kind, name string) func(*corev1.Pod) {
	yes := true
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name,
			UID: types.UID("00000000-0000-0000-0000-000000000001"), Controller: &yes}}
	}
}

func annotated(key, value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{key: value} }
}

func podSelectorPolicy(name string, labels map[string]string, mut func(*v1alpha1.SpiffeRegistrationSpec)) *v1alpha1.SpiffeRegistration {
	return policyFor(name, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: labels}
		mut(s)
	})
}

var _ = Describe("Policies of pods (podSelector)", func() {
	It("register Job pods, bare pods and pods of custom controllers, one entry each with its pod UID, "+
		"rendering the pod's name and owner", func() {
		namespace("podsel-a", map[string]string{"test": "podsel"})
		createSA("podsel-a", "batch")
		on := map[string]string{"spiffe": "on"}
		job := podOn("podsel-a", "backup-x1", "batch", "", on, ownedBy("batch/v1", "Job", "backup"))
		bare := podOn("podsel-a", "debug", "batch", "", on, nil)
		custom := podOn("podsel-a", "widget-0", "batch", "", on, ownedBy("example.com/v1", "Widget", "w1"))
		podOn("podsel-a", "other", "batch", "", map[string]string{"spiffe": "off"}, nil)

		byName := podSelectorPolicy("podsel", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}"
			s.DNSNameTemplates = []string{"{podName}.{namespace}.svc"}
		})
		Expect(k8s.Create(ctx, byName)).To(Succeed())
		Eventually(paths(parentOf("podsel"))).Should(Equal([]string{
			"/ns/podsel-a/pod/backup-x1", "/ns/podsel-a/pod/debug", "/ns/podsel-a/pod/widget-0"}))
		for _, p := range []*corev1.Pod{job, bare, custom} {
			e := entryAt(parentOf("podsel"), "/ns/podsel-a/pod/"+p.Name)
			Expect(selectorsOf(e)).To(Equal([]string{"k8s:ns:podsel-a", "k8s:pod-uid:" + string(p.UID), "k8s:sa:batch"}))
			Expect(e.DnsNames).To(Equal([]string{p.Name + ".podsel-a.svc"}))
		}
		Eventually(policyReady(byName)).Should(Equal("True/Ready"))
		Expect(byName.Status.WorkloadsSelected).To(BeEquivalentTo(3))

		byOwner := podSelectorPolicy("podsel-owner", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/{ownerKind}/{ownerName}"
			s.NamespaceSelector.MatchLabels["test"] = "podsel"
		})
		Expect(k8s.Create(ctx, byOwner)).To(Succeed())
		Eventually(paths(parentOf("podsel-owner"))).Should(Equal([]string{"/ns/podsel-a/Job/backup", "/ns/podsel-a/Widget/w1"}))
		// The bare pod has no owner: it fails alone, named.
		Eventually(policyReady(byOwner)).Should(Equal("False/InvalidSpiffeIDTemplate"))
		Expect(byOwner.Status.Failures).To(HaveLen(1))
		Expect(byOwner.Status.Failures[0].Object).To(Equal("Pod podsel-a/debug"))

		// The pod goes: its entry goes.
		deletePod(job)
		Eventually(paths(parentOf("podsel"))).Should(Equal([]string{"/ns/podsel-a/pod/debug", "/ns/podsel-a/pod/widget-0"}))
	})

	It("never let an annotation write more than one path segment, nor {nodeName} name a node that does not exist", func() {
		namespace("podsel-att", map[string]string{"test": "podsel-att"})
		createSA("podsel-att", "app")
		n := createNode("podsel-att-1")
		on := map[string]string{"spiffe": "on"}
		podOn("podsel-att", "reader", "app", n.Name, on, annotated("example.com/role", "reader"))
		podOn("podsel-att", "forger", "app", n.Name, on, annotated("example.com/role", "reader/sa/admin"))
		podOn("podsel-att", "faker", "app", "made-up-node", on, annotated("example.com/role", "faker"))
		p := podSelectorPolicy("podsel-att", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/node/{nodeName}/role/{annotation:example.com/role}"
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("podsel-att"))).Should(Equal([]string{"/ns/podsel-att/node/podsel-att-1/role/reader"}))
		Eventually(policyReady(p)).Should(Equal("False/InvalidSpiffeIDTemplate"))
		var failed []string
		for _, f := range p.Status.Failures {
			failed = append(failed, f.Object+": "+f.Message)
		}
		Expect(failed).To(ConsistOf(
			And(HavePrefix("Pod podsel-att/faker:"), ContainSubstring("{nodeName}: empty value")),
			And(HavePrefix("Pod podsel-att/forger:"), ContainSubstring("contains '/'"))))
		Consistently(paths(parentOf("podsel-att")), resync).Should(HaveLen(1))
	})

	It("render the operator's cluster name and trust domain, each as one path segment", func() {
		namespace("podsel-cl", map[string]string{"test": "podsel-cl"})
		createSA("podsel-cl", "app")
		on := map[string]string{"spiffe": "on"}
		podOn("podsel-cl", "api-0", "app", "", on, nil)
		p := podSelectorPolicy("podsel-cl", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "cluster/{clusterName}/td/{trustDomain}/ns/{namespace}/pod/{podName}"
			s.DNSNameTemplates = []string{"{podName}.{clusterName}.internal"}
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		want := "/cluster/" + clusterName + "/td/" + trustDomain + "/ns/podsel-cl/pod/api-0"
		Eventually(paths(parentOf("podsel-cl"))).Should(Equal([]string{want}))
		Expect(entryAt(parentOf("podsel-cl"), want).DnsNames).To(Equal([]string{"api-0." + clusterName + ".internal"}))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
	})

	It("register only the pods of serviceAccountName: an admin policy of pods gives no other account of its namespace "+
		"admin rights", func() {
		namespace("podsel-adm", nil)
		createSA("podsel-adm", "ops")
		createSA("podsel-adm", "intruder")
		on := map[string]string{"role": "admin"}
		podOn("podsel-adm", "ops", "ops", "", on, nil)
		// Anyone who may create pods in the namespace can copy the labels.
		podOn("podsel-adm", "intruder", "intruder", "", on, nil)
		p := podSelectorPolicy("podsel-adm", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Admin, s.ServiceAccountName = true, "ops"
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.NamespaceNameLabel: "podsel-adm"}}
			s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}/pod/{podName}"
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("podsel-adm"))).Should(Equal([]string{"/ns/podsel-adm/sa/ops/pod/ops"}))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Expect(entryAt(parentOf("podsel-adm"), "/ns/podsel-adm/sa/ops/pod/ops").Admin).To(BeTrue())
		Consistently(paths(parentOf("podsel-adm")), resync).Should(HaveLen(1))
	})

	It("give a node nothing for a mirror pod it creates with the selected labels", func() {
		namespace("podsel-mirror", map[string]string{"test": "podsel-mirror"})
		createSA("podsel-mirror", "web")
		n := createNode("podsel-mirror-1")
		on := map[string]string{"app": "web"}
		// What a compromised node's kubelet may create: a mirror pod bound to
		// itself, in any namespace, naming no service account.
		podOn("podsel-mirror", "static-1", "", n.Name, on, annotated("kubernetes.io/config.mirror", "0123456789abcdef"))
		podOn("podsel-mirror", "web-1", "web", n.Name, on, nil)
		// The template leaves out {serviceAccount}, so only leaving the mirror
		// pod out keeps it from an entry.
		p := podSelectorPolicy("podsel-mirror", on, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}"
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("podsel-mirror"))).Should(Equal([]string{"/ns/podsel-mirror/pod/web-1"}))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Consistently(paths(parentOf("podsel-mirror")), resync).Should(HaveLen(1))
	})

	It("are refused at admission when pod variables appear without podSelector, or {name} and {kind} with it", func() {
		noSel := policyFor("podsel-bad", func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "pod/{podName}" })
		Expect(k8s.Create(ctx, noSel)).To(MatchError(ContainSubstring("need podSelector")))
		withName := podSelectorPolicy("podsel-bad", map[string]string{"a": "b"}, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.DNSNameTemplates = []string{"{name}.svc"}
		})
		Expect(k8s.Create(ctx, withName)).To(MatchError(ContainSubstring("may not use {kind} or {name}")))
		// workloadSelector does not apply to pods: it would look like a
		// narrowing that is not there.
		withWorkloads := podSelectorPolicy("podsel-bad", map[string]string{"a": "b"}, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
		})
		Expect(k8s.Create(ctx, withWorkloads)).To(MatchError(ContainSubstring("workloadSelector does not apply")))
	})
})
