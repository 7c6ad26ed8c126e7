package operator_test

import (
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// podEntries returns, for the entries under parent at path, their
// k8s:pod-uid selector values, sorted.
func podEntries(parent, path string) func() []string {
	return func() []string {
		var out []string
		for _, e := range entriesUnder(parent) {
			if e.SpiffeId.Path != path {
				continue
			}
			for _, s := range e.Selectors {
				if s.Type == "k8s" && len(s.Value) > 8 && s.Value[:8] == "pod-uid:" {
					out = append(out, s.Value[8:])
				}
			}
		}
		sort.Strings(out)
		return out
	}
}

func uids(pods ...*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = string(p.UID)
	}
	sort.Strings(out)
	return out
}

// bind binds pod to node through the binding subresource, as the scheduler does.
func bind(p *corev1.Pod, node string) {
	GinkgoHelper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	Expect(k8s.SubResource("binding").Create(ctx, p, b)).To(Succeed())
}

var _ = Describe("Per-pod entries", func() {
	It("register one entry per running pod with its k8s:pod-uid selector, and delete it when the pod goes", func() {
		namespace("perpod-a", map[string]string{"test": "perpod"})
		createSA("perpod-a", "web")
		deployment("perpod-a", "web", "web", nil)
		a := pod("perpod-a", "web-a", "web", map[string]string{"app": "web"})
		b := pod("perpod-a", "web-b", "web", map[string]string{"app": "web"})
		podOn("perpod-a", "static", "", "some-node", map[string]string{"app": "web"}, func(p *corev1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.mirror": "x"}
		})
		p := policyFor("perpod", func(s *v1alpha1.SpiffeRegistrationSpec) { s.EntryGranularity = v1alpha1.EntryPerPod })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(podEntries(parentOf("perpod"), "/ns/perpod-a/sa/web")).Should(Equal(uids(a, b)))
		e := entryAt(parentOf("perpod"), "/ns/perpod-a/sa/web")
		Expect(selectorsOf(e)).To(ContainElements("k8s:ns:perpod-a", "k8s:sa:web"))
		Expect(selectorsOf(e)).To(HaveLen(3))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Expect(p.Status.EntriesDesired).To(BeEquivalentTo(2))

		c := pod("perpod-a", "web-c", "web", map[string]string{"app": "web"})
		Eventually(podEntries(parentOf("perpod"), "/ns/perpod-a/sa/web")).Should(Equal(uids(a, b, c)))
		deletePod(a)
		Eventually(podEntries(parentOf("perpod"), "/ns/perpod-a/sa/web")).Should(Equal(uids(b, c)))
	})

	It("keep an old pod's entry while it runs after its Deployment's service account changed", func() {
		namespace("perpod-sa", map[string]string{"test": "perpod-sa"})
		createSA("perpod-sa", "old")
		createSA("perpod-sa", "new")
		d := deployment("perpod-sa", "web", "old", nil)
		old := pod("perpod-sa", "web-old", "old", map[string]string{"app": "web"})
		p := policyFor("perpod-sa", func(s *v1alpha1.SpiffeRegistrationSpec) { s.EntryGranularity = v1alpha1.EntryPerPod })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(podEntries(parentOf("perpod-sa"), "/ns/perpod-sa/sa/old")).Should(Equal(uids(old)))

		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Template.Spec.ServiceAccountName = "new"
		Expect(k8s.Patch(ctx, d, patch)).To(Succeed())
		fresh := pod("perpod-sa", "web-new", "new", map[string]string{"app": "web"})
		Eventually(podEntries(parentOf("perpod-sa"), "/ns/perpod-sa/sa/new")).Should(Equal(uids(fresh)))
		Consistently(podEntries(parentOf("perpod-sa"), "/ns/perpod-sa/sa/old"), resync).Should(Equal(uids(old)))
		deletePod(old)
		Eventually(podEntries(parentOf("perpod-sa"), "/ns/perpod-sa/sa/old")).Should(BeEmpty())
	})

	It("with per-node parents, register a pod's entry under its node's agent once it is bound", func() {
		namespace("perpod-node", map[string]string{"test": "perpod-node"})
		createSA("perpod-node", "web")
		deployment("perpod-node", "web", "web", nil)
		n := createNode("perpod-node-1")
		pending := pod("perpod-node", "web-1", "web", map[string]string{"app": "web"})
		p := perNodePolicy("perpod-node", func(s *v1alpha1.SpiffeRegistrationSpec) { s.EntryGranularity = v1alpha1.EntryPerPod })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Consistently(everywhere("/ns/perpod-node/"), resync).Should(BeEmpty())
		bind(pending, n.Name)
		Eventually(podEntries(agentOf(n), "/ns/perpod-node/sa/web")).Should(Equal(uids(pending)))
	})
})
