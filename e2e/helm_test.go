//go:build helm_e2e

// The Helm specs need a cluster whose real node runs the operators as pods
// and that starts none of its own; they are built with -tags helm_e2e:
//
//	E2E_CLUSTER=deployed E2E_INSTALL=helm go test -tags helm_e2e -timeout 40m -v ./e2e/ -ginkgo.label-filter=helm
//
// (make e2e-helm). The cluster offers what they need by implementing helmTarget.

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/charts"
	"github.com/trustplane/trustplane/e2e/framework"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// helmTarget is a cluster the chart can be installed on: its node has the
// operators' images (trustplane/<operator>:<tag>), no operator of its own
// runs, and HelmValuesFile writes the values with which the chart runs
// there: how the operator pods reach its apiserver and SPIRE server
// (spire.mode and its settings), which image tag to run and what else the
// cluster needs; it also gives the chart's SPIRE clients in namespace
// their SPIRE admin entries. The deployed cluster is one with
// E2E_INSTALL=helm (make e2e-helm).
type helmTarget interface {
	framework.Cluster
	// HelmValuesFile returns the path of a values file for charts/trustplane
	// released into namespace.
	HelmValuesFile(ctx context.Context, namespace string) (string, error)
}

const (
	helmRelease   = "tp"
	helmNamespace = "e2e-helm"
	// helmTimeout bounds an install or upgrade: images are on the node, so
	// it is scheduling, starting and leader election.
	helmTimeout = 5 * time.Minute
)

var _ = Describe("helm install, upgrade and uninstall of charts/trustplane", Ordered, Label("helm"), func() {
	var (
		w        framework.Workloads
		target   helmTarget
		helm     string
		chart    string
		values   string
		ns, id   string
		entryIDs []string
	)
	// runHelm runs helm against the cluster and fails the spec on an error.
	runHelm := func(ctx context.Context, args ...string) string {
		GinkgoHelper()
		cmd := exec.CommandContext(ctx, helm, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
	// available says how many replicas of an operator's Deployment are available.
	available := func(ctx context.Context, op string) func() (int32, error) {
		return func() (int32, error) {
			d := &appsv1.Deployment{}
			err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: op}, d)
			return d.Status.AvailableReplicas, err
		}
	}

	BeforeAll(func(ctx context.Context) {
		w = requireWorkloads()
		var ok bool
		target, ok = cluster.(helmTarget)
		Expect(ok).To(BeTrue(), "this cluster does not implement helmTarget: it cannot run the chart's operators as pods")
		var err error
		helm, err = testenv.Binary("helm")
		Expect(err).NotTo(HaveOccurred())
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		chart = filepath.Join(root, charts.Dir)
		values, err = target.HelmValuesFile(ctx, helmNamespace)
		Expect(err).NotTo(HaveOccurred())
	})

	It("installs the three operators, each available", func(ctx context.Context) {
		args := []string{"install", helmRelease, chart, "--namespace", helmNamespace, "--create-namespace",
			"--wait", "--timeout", helmTimeout.String(), "--values", values}
		runHelm(ctx, args...)
		for _, o := range operatorimage.Operators() {
			Eventually(available(ctx, o.Name), helmTimeout, time.Second).Should(BeNumerically(">=", 1), o.Name)
		}
		pods := &corev1.PodList{}
		Expect(cluster.Client().List(ctx, pods, client.InNamespace(helmNamespace), client.MatchingLabels{"app.kubernetes.io/instance": helmRelease})).To(Succeed())
		Expect(pods.Items).NotTo(BeEmpty())
		diagnostics := cluster.Diagnostics()
		for _, p := range pods.Items {
			Expect(diagnostics).To(ContainSubstring("pod "+p.Name+":"), "a failing spec's diagnostics show the release's pods")
		}
	}, NodeTimeout(helmTimeout+time.Minute))

	It("gives a pod its SPIFFE ID through the installed operators", func(ctx context.Context) {
		ns = fmt.Sprintf("e2e-helm-pods-%d", nsCount.Add(1))
		Expect(cluster.Client().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"e2e.trustplane.dev/helm": "true"}}})).To(Succeed())
		create(ctx, `
apiVersion: spiffe.trustplane.dev/v1alpha1
kind: SpiffeRegistration
metadata:
  name: e2e-helm
  labels: {trustplane.dev/environment: %s}
spec:
  trustDomain: %s
  parentID: %s
  spiffeIDTemplate: ns/{namespace}/sa/{serviceAccount}
  namespaceSelector: {matchLabels: {e2e.trustplane.dev/helm: "true"}}
`, environment, cluster.TrustDomain(), cluster.AgentParentID())
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
		Expect(cluster.Client().Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "spiffe-operator"}, before)).To(Succeed())

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
		runHelm(ctx, "upgrade", helmRelease, chart, "--namespace", helmNamespace, "--reuse-values",
			"--set", "spiffeOperator.flags.requeueAfter=20m", "--wait", "--timeout", helmTimeout.String())
		Eventually(func() (bool, error) {
			d := &appsv1.Deployment{}
			if err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "spiffe-operator"}, d); err != nil {
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

	It("leaves nothing of the release but the CRDs on helm uninstall", func(ctx context.Context) {
		// The operator removes the entries of a deleted registration
		// while it runs; the registration goes first.
		reg := &unstructured.Unstructured{}
		reg.SetAPIVersion("spiffe.trustplane.dev/v1alpha1")
		reg.SetKind("SpiffeRegistration")
		reg.SetName("e2e-helm")
		Expect(cluster.Client().Delete(ctx, reg)).To(Succeed())
		Eventually(entryCount(ctx, id), timeout, time.Second).Should(BeZero())

		runHelm(ctx, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", helmTimeout.String())
		release := client.MatchingLabels{"app.kubernetes.io/instance": helmRelease, "app.kubernetes.io/part-of": "trustplane"}
		for _, list := range []client.ObjectList{
			&appsv1.DeploymentList{}, &corev1.ServiceAccountList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
			&policyv1.PodDisruptionBudgetList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{},
			&rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{},
			&admissionv1.ValidatingAdmissionPolicyList{}, &admissionv1.ValidatingAdmissionPolicyBindingList{},
		} {
			Eventually(func() (int, error) {
				if err := cluster.Client().List(ctx, list, release); err != nil {
					return 0, err
				}
				return meta.LenList(list), nil
			}, timeout, time.Second).Should(BeZero(), fmt.Sprintf("%T left behind", list))
		}
		Eventually(func() (int, error) {
			pods := &corev1.PodList{}
			err := cluster.Client().List(ctx, pods, client.InNamespace(helmNamespace), release)
			return len(pods.Items), err
		}, timeout, time.Second).Should(BeZero(), "operator pods left behind")
		// The client's scheme is client-go's: CRDs are read unstructured.
		crds := &unstructured.UnstructuredList{}
		crds.SetAPIVersion("apiextensions.k8s.io/v1")
		crds.SetKind("CustomResourceDefinitionList")
		Expect(cluster.Client().List(ctx, crds, release)).To(Succeed())
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		var want int
		for _, o := range operatorimage.Operators() {
			files, err := filepath.Glob(filepath.Join(root, o.Name, "config", "crd", "bases", "*.yaml"))
			Expect(err).NotTo(HaveOccurred())
			want += len(files)
		}
		Expect(crds.Items).To(HaveLen(want), "the CRDs stay (helm.sh/resource-policy: keep)")
	}, NodeTimeout(helmTimeout+2*time.Minute))
})
