//go:build helm_e2e

// The Helm specs need the deployed cluster with the operators installed by
// `helm install` of charts/trustplane (E2E_INSTALL=helm); they are built
// with -tags helm_e2e and run beside the pod-level specs on that cluster:
//
//	E2E_CLUSTER=deployed E2E_INSTALL=helm go test -tags helm_e2e -timeout 40m -v ./e2e/ -ginkgo.label-filter='(helm || smoke) && !make-deploy'
//
// (make e2e-helm). The cluster offers what they need by implementing helmTarget.

package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// helmTarget is a cluster whose operators run from a release of
// charts/trustplane: its node has their images, and HelmRelease says which
// release, with which values (how the operator pods reach its apiserver
// and SPIRE server, which image tag, what else the cluster needs), so that
// a spec can upgrade, uninstall and install it again. The deployed cluster
// is one with E2E_INSTALL=helm (make e2e-helm).
type helmTarget interface {
	framework.Cluster
	// HelmRelease returns the release running the operators.
	HelmRelease() (framework.HelmRelease, error)
	// InstallHelmRelease installs the release again (after an uninstall)
	// and waits for its operators.
	InstallHelmRelease(ctx context.Context) error
	// Helm runs helm against the cluster.
	Helm(ctx context.Context, args ...string) (string, error)
}

// helmTimeout bounds an install or upgrade: images are on the node, so it is
// scheduling, starting and leader election.
const helmTimeout = 5 * time.Minute

// Ordered, and it leaves the release as it found it: installed with the
// cluster's values, the pod-level specs around it run against the same
// operators.
var _ = Describe("helm install, upgrade and uninstall of charts/trustplane", Ordered, Label("helm"), func() {
	var (
		w            framework.Workloads
		target       helmTarget
		release      framework.HelmRelease
		ns, id       string
		entryIDs     []string
		registration *unstructured.Unstructured
	)
	// runHelm runs helm against the cluster and fails the spec on an error.
	runHelm := func(ctx context.Context, args ...string) string {
		GinkgoHelper()
		out, err := target.Helm(ctx, args...)
		Expect(err).NotTo(HaveOccurred(), out)
		return out
	}
	// available says how many replicas of an operator's Deployment are available.
	available := func(ctx context.Context, op string) func() (int32, error) {
		return func() (int32, error) {
			d := &appsv1.Deployment{}
			err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: op}, d)
			return d.Status.AvailableReplicas, err
		}
	}
	// releaseObjects selects the objects the chart labels as the release's.
	releaseObjects := func() client.MatchingLabels {
		return client.MatchingLabels{"app.kubernetes.io/instance": release.Name, "app.kubernetes.io/part-of": "trustplane"}
	}

	BeforeAll(func(ctx context.Context) {
		w = requireWorkloads()
		var ok bool
		target, ok = cluster.(helmTarget)
		Expect(ok).To(BeTrue(), "this cluster does not implement helmTarget: it cannot run the chart's operators as pods")
		var err error
		release, err = target.HelmRelease()
		Expect(err).NotTo(HaveOccurred())
	})

	It("runs the three operators from the release, each available, and a failing spec's diagnostics show their pods", func(ctx context.Context) {
		Expect(runHelm(ctx, "status", release.Name, "--namespace", release.Namespace)).To(MatchRegexp(`(?m)^STATUS: deployed$`))
		for _, o := range operatorimage.Operators() {
			Eventually(available(ctx, o.Name), helmTimeout, time.Second).Should(BeNumerically(">=", 1), o.Name)
		}
		pods := &corev1.PodList{}
		Expect(cluster.Client().List(ctx, pods, client.InNamespace(release.Namespace), releaseObjects())).To(Succeed())
		Expect(pods.Items).NotTo(BeEmpty())
		diagnostics := cluster.Diagnostics()
		Expect(diagnostics).To(ContainSubstring("--- helm release "+release.Name+" ---\n"), "and the release's status")
		for _, p := range pods.Items {
			Expect(diagnostics).To(ContainSubstring("pod "+p.Name+":"), "a failing spec's diagnostics show the release's pods")
		}
		// And their events: the scheduler placed each pod on the node.
		Expect(diagnostics).To(MatchRegexp(`(?m)^event \S+ Normal Scheduled \(x\d+\): Successfully assigned `+release.Namespace+`/`), "and their events")
	}, NodeTimeout(helmTimeout+time.Minute))

	It("gives a pod its SPIFFE ID through the installed operators", func(ctx context.Context) {
		ns = fmt.Sprintf("e2e-helm-pods-%d", nsCount.Add(1))
		registration, _ = identityNamespace(ctx, framework.IdentityNamespace{Name: ns, Label: "e2e.trustplane.dev/helm",
			ParentID: cluster.AgentParentID(), IDTemplate: "ns/{namespace}/sa/{serviceAccount}"})
		probeDeployment(ctx, w, ns, "web", "web-sa")
		id = workloadID(ns, "web-sa")
		Eventually(probeLog(ctx, ns, "web"), podTimeout, time.Second).Should(MatchRegexp(`(?m)^x509-svid id=` + id + ` `))
		entries, err := framework.EntriesFor(ctx, cluster, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(entries).To(HaveLen(1))
		entryIDs = []string{entries[0].Id}
	}, NodeTimeout(podTimeout+time.Minute))

	It("rolls spiffe-operator on helm upgrade with a changed value without losing the entry", func(ctx context.Context) {
		before := &appsv1.Deployment{}
		Expect(cluster.Client().Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: "spiffe-operator"}, before)).To(Succeed())

		// Watch the entry all through the upgrade: it must never be missing.
		var lost atomic.Value
		watchCtx, stopWatch := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for watchCtx.Err() == nil {
				entries, err := framework.EntriesFor(watchCtx, cluster, id)
				if err == nil && (len(entries) != 1 || entries[0].Id != entryIDs[0]) {
					lost.Store(fmt.Sprintf("entries of %s during the upgrade: %v", id, entries))
				}
				time.Sleep(200 * time.Millisecond) // polling interval of the watcher, not a synchronisation
			}
		}()
		runHelm(ctx, "upgrade", release.Name, release.Chart, "--namespace", release.Namespace, "--reuse-values",
			"--set", "spiffeOperator.flags.requeueAfter=20m", "--wait", "--timeout", helmTimeout.String())
		Eventually(func() (bool, error) {
			d := &appsv1.Deployment{}
			if err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: "spiffe-operator"}, d); err != nil {
				return false, err
			}
			rolled := d.Generation > before.Generation && d.Status.ObservedGeneration == d.Generation &&
				d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.AvailableReplicas == *d.Spec.Replicas
			return rolled && slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--requeue-after=20m"), nil
		}, helmTimeout, time.Second).Should(BeTrue(), "the Deployment rolled out with the new flag")
		// The new replicas have taken over; keep watching for a while.
		Consistently(func() ([]string, error) {
			entries, err := framework.EntriesFor(ctx, cluster, id)
			ids := make([]string, 0, len(entries))
			for _, e := range entries {
				ids = append(ids, e.Id)
			}
			return ids, err
		}, 10*time.Second, time.Second).Should(Equal(entryIDs), "the same entry, not a re-created one")
		stopWatch()
		<-done
		Expect(lost.Load()).To(BeNil())
		Expect(probeLog(ctx, ns, "web")()).To(MatchRegexp(`(?m)^x509-svid id=` + id + ` `))
	}, NodeTimeout(helmTimeout+2*time.Minute))

	It("leaves nothing of the release but the CRDs on helm uninstall, and installs again over them", func(ctx context.Context) {
		// The operator removes the entries of a deleted registration
		// while it runs; the registration goes first.
		Expect(cluster.Client().Delete(ctx, registration)).To(Succeed())
		Eventually(entryCount(ctx, id), timeout, time.Second).Should(BeZero())

		runHelm(ctx, "uninstall", release.Name, "--namespace", release.Namespace, "--wait", "--timeout", helmTimeout.String())
		for _, list := range []client.ObjectList{
			&appsv1.DeploymentList{}, &corev1.ServiceAccountList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
			&policyv1.PodDisruptionBudgetList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{},
			&rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{},
			&admissionv1.ValidatingAdmissionPolicyList{}, &admissionv1.ValidatingAdmissionPolicyBindingList{},
		} {
			Eventually(func() (int, error) {
				if err := cluster.Client().List(ctx, list, releaseObjects()); err != nil {
					return 0, err
				}
				return meta.LenList(list), nil
			}, timeout, time.Second).Should(BeZero(), fmt.Sprintf("%T left behind", list))
		}
		Eventually(func() (int, error) {
			pods := &corev1.PodList{}
			err := cluster.Client().List(ctx, pods, client.InNamespace(release.Namespace), releaseObjects())
			return len(pods.Items), err
		}, timeout, time.Second).Should(BeZero(), "operator pods left behind")
		// The client's scheme is client-go's: CRDs are read unstructured.
		crds := &unstructured.UnstructuredList{}
		crds.SetAPIVersion("apiextensions.k8s.io/v1")
		crds.SetKind("CustomResourceDefinitionList")
		Expect(cluster.Client().List(ctx, crds, releaseObjects())).To(Succeed())
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		var want int
		for _, o := range operatorimage.Operators() {
			files, err := filepath.Glob(filepath.Join(root, o.Name, "config", "crd", "bases", "*.yaml"))
			Expect(err).NotTo(HaveOccurred())
			want += len(files)
		}
		Expect(crds.Items).To(HaveLen(want), "the CRDs stay (helm.sh/resource-policy: keep)")

		By("helm install again over the kept CRDs: the operators run as before, for the specs after this one")
		Expect(target.InstallHelmRelease(ctx)).To(Succeed())
		for _, o := range operatorimage.Operators() {
			Eventually(available(ctx, o.Name), helmTimeout, time.Second).Should(BeNumerically(">=", 1), o.Name)
		}
	}, NodeTimeout(2*helmTimeout+2*time.Minute))
})
