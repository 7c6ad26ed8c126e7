package operator_test

import (
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// createNode creates a Node object, as a kubelet registering would.
func createNode(name string) *corev1.Node {
	GinkgoHelper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	return n
}

// agentOf returns the k8s_psat agent ID of node n: the default per-node parent.
func agentOf(n *corev1.Node) string {
	return "spiffe://" + trustDomain + "/spire/agent/k8s_psat/" + clusterName + "/" + string(n.UID)
}

// podOn creates a pod bound to the node named node, as the scheduler would
// bind it (no scheduler runs here); mut, if set, changes it first.
func podOn(ns, name, sa, node string, labels map[string]string, mut func(*corev1.Pod)) *corev1.Pod {
	GinkgoHelper()
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	if mut != nil {
		mut(p)
	}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	return p
}

// perNodePolicy is policyFor without a parentID: per-node parents, from the
// default template unless mut sets one.
func perNodePolicy(name string, mut func(*v1alpha1.SpiffeRegistrationSpec)) *v1alpha1.SpiffeRegistration {
	return policyFor(name, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.ParentID = ""
		if mut != nil {
			mut(s)
		}
	})
}

// everywhere returns "<parent path> <SPIFFE ID path>" for every entry of
// SPIRE whose SPIFFE ID path starts with prefix, sorted.
func everywhere(prefix string) func() []string {
	return func() []string {
		list, err := spireAPI.ListAll(ctx)
		Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, e := range list {
			if strings.HasPrefix(e.SpiffeId.Path, prefix) {
				out = append(out, e.ParentId.Path+" "+e.SpiffeId.Path)
			}
		}
		sort.Strings(out)
		return out
	}
}

var _ = Describe("Per-node parents (the default)", func() {
	It("register one entry per identity and node that runs its pods, under that node's agent, "+
		"create it when a pod is bound to a node and delete it when the node's last pod goes", func() {
		namespace("pernode-a", map[string]string{"test": "pernode"})
		createSA("pernode-a", "web")
		createSA("pernode-a", "api")
		deployment("pernode-a", "web", "web", nil)
		deployment("pernode-a", "api", "api", nil)
		n1, n2 := createNode("pernode-1"), createNode("pernode-2")
		podOn("pernode-a", "web-1", "web", n1.Name, map[string]string{"app": "web"}, nil)
		web2 := podOn("pernode-a", "web-2", "web", n2.Name, map[string]string{"app": "web"}, nil)
		podOn("pernode-a", "api-1", "api", n1.Name, map[string]string{"app": "api"}, nil)

		p := perNodePolicy("pernode", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(agentOf(n1))).Should(Equal([]string{"/ns/pernode-a/sa/api", "/ns/pernode-a/sa/web"}))
		// Least privilege: the agent of a node that runs no api pod cannot
		// issue api's SVIDs.
		Eventually(paths(agentOf(n2))).Should(Equal([]string{"/ns/pernode-a/sa/web"}))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Expect(recordedParents(p)()).To(ConsistOf(agentOf(n1), agentOf(n2)))
		Expect(p.Status.EntriesDesired).To(BeEquivalentTo(3))
		Expect(selectorsOf(entryAt(agentOf(n2), "/ns/pernode-a/sa/web"))).To(Equal([]string{"k8s:ns:pernode-a", "k8s:sa:web"}))

		// The last web pod leaves node 2: its entry there goes; node 1's stays.
		deletePod(web2)
		Eventually(paths(agentOf(n2))).Should(BeEmpty())
		Expect(paths(agentOf(n1))()).To(Equal([]string{"/ns/pernode-a/sa/api", "/ns/pernode-a/sa/web"}))
		Eventually(recordedParents(p)).Should(Equal([]string{agentOf(n1)}))

		// A pod bound to node 2 brings it back; a pod not yet bound brings nothing.
		podOn("pernode-a", "web-3", "web", n2.Name, map[string]string{"app": "web"}, nil)
		podOn("pernode-a", "api-pending", "api", "", map[string]string{"app": "api"}, nil)
		Eventually(paths(agentOf(n2))).Should(Equal([]string{"/ns/pernode-a/sa/web"}))
		Consistently(paths(agentOf(n2)), resync).Should(Equal([]string{"/ns/pernode-a/sa/web"}))

		// Deleting the policy deletes its entries under every node's parent.
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(everywhere("/ns/pernode-a/")).Should(BeEmpty())
	})

	It("render a parentIDTemplate with the node's name, and keep a fixed parentID available", func() {
		namespace("pernode-tpl", map[string]string{"test": "pernode-tpl"})
		createSA("pernode-tpl", "web")
		deployment("pernode-tpl", "web", "web", nil)
		n := createNode("pernode-tpl-1")
		podOn("pernode-tpl", "web-1", "web", n.Name, map[string]string{"app": "web"}, nil)
		p := perNodePolicy("pernode-tpl", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.ParentIDTemplate = "agents/{clusterName}/{nodeName}"
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		parent := "spiffe://" + trustDomain + "/agents/" + clusterName + "/" + n.Name
		Eventually(paths(parent)).Should(Equal([]string{"/ns/pernode-tpl/sa/web"}))

		// Switching to a fixed parent creates the entry there, then deletes
		// the per-node one.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.ParentIDTemplate = ""
		p.Spec.ParentID = parentOf("pernode-tpl")
		Expect(k8s.Patch(ctx, p, patch)).To(Succeed())
		Eventually(paths(parentOf("pernode-tpl"))).Should(Equal([]string{"/ns/pernode-tpl/sa/web"}))
		Eventually(paths(parent)).Should(BeEmpty())
	})

	It("move a running pod's entry to a node re-created under the same name (a new UID, so a new agent ID) "+
		"without a moment without it, keeping the old agent's while the pod runs", func() {
		namespace("pernode-re", map[string]string{"test": "pernode-re"})
		createSA("pernode-re", "web")
		deployment("pernode-re", "web", "web", nil)
		old := createNode("pernode-re-1")
		running := podOn("pernode-re", "web-1", "web", old.Name, map[string]string{"app": "web"}, nil)
		p := perNodePolicy("pernode-re", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(agentOf(old))).Should(Equal([]string{"/ns/pernode-re/sa/web"}))

		// Watch the namespace's entries, under any parent, throughout.
		var (
			mu   sync.Mutex
			gaps []string
		)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if len(everywhere("/ns/pernode-re/")()) == 0 {
					mu.Lock()
					gaps = append(gaps, time.Now().Format("15:04:05.000"))
					mu.Unlock()
				}
			}
		}()
		Expect(k8s.Delete(ctx, old)).To(Succeed())
		// The pod still runs (no node controller evicts it here), so the
		// entry under the gone node's agent stays while the node is away.
		Consistently(paths(agentOf(old)), resync).Should(Equal([]string{"/ns/pernode-re/sa/web"}))
		nn := createNode(old.Name)
		Expect(nn.UID).NotTo(Equal(old.UID))
		Eventually(paths(agentOf(nn))).Should(Equal([]string{"/ns/pernode-re/sa/web"}))
		// The node's agent runs under the old ID until it attests again:
		// the entry under it stays while the pod that ran there runs.
		Consistently(paths(agentOf(old)), resync).Should(Equal([]string{"/ns/pernode-re/sa/web"}))
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		Expect(gaps).To(BeEmpty(), "observations without the entry under any parent")
		deletePod(running)
		Eventually(paths(agentOf(old))).Should(BeEmpty())
	})
})

var _ = Describe("Per-node parents under attack", func() {
	It("give nothing to a pod bound to a node name no Node object has", func() {
		namespace("pernode-fake", map[string]string{"test": "pernode-fake"})
		createSA("pernode-fake", "web")
		createSA("pernode-fake", "thief")
		deployment("pernode-fake", "web", "web", nil)
		deployment("pernode-fake", "thief", "thief", nil)
		n := createNode("pernode-fake-1")
		podOn("pernode-fake", "thief-1", "thief", "made-up-node", map[string]string{"app": "thief"}, nil)
		podOn("pernode-fake", "web-1", "web", n.Name, map[string]string{"app": "web"}, nil)
		p := perNodePolicy("pernode-fake", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(agentOf(n))).Should(Equal([]string{"/ns/pernode-fake/sa/web"}))
		Consistently(everywhere("/ns/pernode-fake/sa/thief"), resync).Should(BeEmpty())
		Eventually(recordedParents(p)).Should(Equal([]string{agentOf(n)}))
	})

	It("give a node nothing for a mirror pod it creates in a namespace (a static pod runs as no service account, "+
		"not as default)", func() {
		namespace("pernode-mirror", map[string]string{"test": "pernode-mirror"})
		createSA("pernode-mirror", "web")
		// The namespace's default account has an identity: the Deployment
		// names no service account.
		deployment("pernode-mirror", "legit", "", nil)
		deployment("pernode-mirror", "web", "web", nil)
		n := createNode("pernode-mirror-1")
		// What a compromised node's kubelet may create: a mirror pod bound to
		// itself, in any namespace, naming no service account.
		podOn("pernode-mirror", "static-1", "", n.Name, map[string]string{"app": "legit"}, func(p *corev1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.mirror": "0123456789abcdef"}
		})
		podOn("pernode-mirror", "web-1", "web", n.Name, map[string]string{"app": "web"}, nil)
		p := perNodePolicy("pernode-mirror", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(agentOf(n))).Should(ContainElement("/ns/pernode-mirror/sa/web"))
		Consistently(paths(agentOf(n)), resync).Should(Equal([]string{"/ns/pernode-mirror/sa/web"}))
	})

	It("are refused at admission without the node in the template, with both parent fields, or with workload variables", func() {
		for _, tc := range []struct{ parentID, template, message string }{
			{"", "spire/agent/k8s_psat/{clusterName}", "must name the node"},
			{"", "agents/{namespace}/{nodeUID}", "spec.parentIDTemplate"},
			{"", "agents/{label:node}/{nodeUID}", "spec.parentIDTemplate"},
			{"", "/agents/{nodeUID}", "must not start or end with '/'"},
			{parentOf("x"), "agents/{nodeUID}", "not both"},
		} {
			p := perNodePolicy("pernode-bad", func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.ParentID, s.ParentIDTemplate = tc.parentID, tc.template
			})
			err := k8s.Create(ctx, p)
			Expect(err).To(HaveOccurred(), tc.template)
			Expect(err.Error()).To(ContainSubstring(tc.message), tc.template)
		}
	})
})
