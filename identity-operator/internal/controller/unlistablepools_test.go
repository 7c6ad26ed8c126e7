package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// The operator reads pools through its cache. When the InferencePool CRD
// is installed after startup and the operator's role allows neither list
// nor watch on InferencePools, the informer for them never syncs (with
// either verb it does: client-go's streaming list needs only watch, and it
// falls back to a plain list): a read that waited for it would hold its
// worker for ever. With one worker, a binding to a Deployment then
// converges only if the operator (setup) hands the handler the cache's
// informers, so that a pool read fails at once instead.
var _ = Describe("InferencePool CRD installed after startup, with a role that may neither list nor watch InferencePools", func() {
	It("reports PoolCacheNotSynced for a binding to an InferencePool and still converges a binding to a Deployment on its only worker", func(ctx SpecContext) {
		r := startWithPoolVerbs(ctx, 1, "get")

		By("binding to an InferencePool before its CRD exists")
		r.bind("llm", v1alpha1.PoolReference{Name: "llm"})
		Eventually(r.reason("llm")).Should(Equal(v1alpha1.ReasonInferencePoolCRDMissing))

		By("installing the CRD: the pool read fails at once, the informer cannot sync")
		r.installPoolCRD()
		Eventually(r.reason("llm")).WithTimeout(30 * time.Second).Should(Equal(v1alpha1.ReasonPoolCacheNotSynced))

		By("binding to a Deployment: the only worker is free for it")
		r.bindToDeployment("web")
		Eventually(r.reason("web")).WithTimeout(30 * time.Second).Should(Equal("True"))
		Expect(r.reason("llm")(Default)).To(Equal(v1alpha1.ReasonPoolCacheNotSynced))
	}, SpecTimeout(2*time.Minute))
})

// With list or watch alone the informer syncs, and a binding to a pool
// that does not exist is reported as such, not as a cache that cannot sync.
var _ = DescribeTable("InferencePool CRD installed after startup, with a role that allows only one of list and watch on InferencePools",
	func(ctx SpecContext, verbs []string) {
		r := startWithPoolVerbs(ctx, 0, verbs...)
		r.bind("llm", v1alpha1.PoolReference{Name: "llm"})
		Eventually(r.reason("llm")).Should(Equal(v1alpha1.ReasonInferencePoolCRDMissing))
		r.installPoolCRD()
		Eventually(r.reason("llm")).WithTimeout(30 * time.Second).Should(Equal(v1alpha1.ReasonTargetPoolNotFound))
	},
	Entry("get and watch: the streaming list needs only watch", []string{"get", "watch"}, SpecTimeout(2*time.Minute)),
	Entry("get and list: client-go falls back to a plain list", []string{"get", "list"}, SpecTimeout(2*time.Minute)),
)

// poolVerbsRun is an operator on a control plane of its own without the
// InferencePool CRD, whose role allows only some verbs on InferencePools.
type poolVerbsRun struct {
	ctx      context.Context
	lcp      *testenv.ControlPlane
	c        client.Client
	ns       string
	roleName string
}

// startWithPoolVerbs starts a poolVerbsRun whose role allows only verbs on
// InferencePools, with workers workers (0: the default), and creates its
// namespace.
func startWithPoolVerbs(ctx context.Context, workers int, verbs ...string) *poolVerbsRun {
	GinkgoHelper()
	return startWithRole(ctx, workers, roleWithPoolVerbs(verbs...))
}

// startWithRole starts a poolVerbsRun whose operator holds the ClusterRole
// in roleFile, with workers workers (0: the default), and creates its
// namespace.
func startWithRole(ctx context.Context, workers int, roleFile string) *poolVerbsRun {
	GinkgoHelper()
	lcp := startLateCRDControlPlane()
	access, err := lcp.AsServiceAccount(ctx, operatorNamespace, operatorSA, roleFile)
	Expect(err).NotTo(HaveOccurred())
	fw := config.Default()
	fw.DefaultEnvironment = environment
	if workers > 0 {
		fw.MaxConcurrentReconciles = workers
	}
	startLateCRDOperator(lcp, access.Config, fw, 0)
	r := &poolVerbsRun{ctx: ctx, lcp: lcp, c: lcp.Client, ns: "pool-verbs", roleName: roleName(roleFile)}
	Expect(r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}})).To(Succeed())
	return r
}

// bind creates the binding name to ref, with a service account of its own:
// two bindings of one account and variant conflict.
func (r *poolVerbsRun) bind(name string, ref v1alpha1.PoolReference) {
	GinkgoHelper()
	Expect(r.c.Create(r.ctx, &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef: ref, ServiceAccountName: name, IdentityBoundary: v1alpha1.IdentityBoundary{Variant: "v1"},
		},
	})).To(Succeed())
}

// bindToDeployment creates the Deployment name (pods labelled app=name)
// and binds to it under the same name.
func (r *poolVerbsRun) bindToDeployment(name string) {
	GinkgoHelper()
	labels := map[string]string{"app": name}
	Expect(r.c.Create(r.ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.org/app:1"}}},
			},
		},
	})).To(Succeed())
	r.bind(name, v1alpha1.PoolReference{Group: v1alpha1.AppsGroup, Kind: v1alpha1.DeploymentKind, Name: name})
}

// reason reads the Ready reason of binding name (readyReasonOf).
func (r *poolVerbsRun) reason(name string) func(Gomega) string {
	return func(g Gomega) string {
		b := &v1alpha1.IdentityBinding{}
		g.Expect(r.c.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, b)).To(Succeed())
		return readyReasonOf(b)
	}
}

// installPoolCRD installs the InferencePool CRD while the operator runs.
func (r *poolVerbsRun) installPoolCRD() {
	GinkgoHelper()
	_, err := envtest.InstallCRDs(r.lcp.Config, envtest.CRDInstallOptions{Paths: inferencePoolCRDFiles(), ErrorIfPathMissing: true})
	Expect(err).NotTo(HaveOccurred())
}

// roleWithPoolVerbs writes the operator's generated role with only verbs on
// InferencePools (a role from an older release, or edited by hand) and
// returns its path.
func roleWithPoolVerbs(verbs ...string) string {
	GinkgoHelper()
	edited := "  - inferencepools\n  verbs:\n"
	for _, v := range verbs {
		edited += "  - " + v + "\n"
	}
	return roleEdited("  - inferencepools\n  verbs:\n  - get\n  - list\n  - watch\n", edited)
}

// roleEdited writes the operator's generated role with its one rule text
// rule replaced by edited, and returns its path.
func roleEdited(rule, edited string) string {
	GinkgoHelper()
	data, err := os.ReadFile(generatedRole())
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.Count(string(data), rule)).To(Equal(1), "the role's rule %q changed; update this spec", rule)
	path := filepath.Join(GinkgoT().TempDir(), "role.yaml")
	Expect(os.WriteFile(path, []byte(strings.Replace(string(data), rule, edited, 1)), 0o600)).To(Succeed())
	return path
}
