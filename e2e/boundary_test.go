//go:build helm_e2e

package e2e_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The chart installs identity-operator's admission policies, so this spec
// runs on the cluster whose operators come from it (make e2e-helm), where
// a real kube-controller-manager turns Deployments into ReplicaSets and
// pods as the policies' allowed users: it shows that their own work passes
// the policies.
var _ = Describe("the identity boundary's admission policies with a real kube-controller-manager", Ordered, Label("helm"), func() {
	const variantLabel = "identity.trustplane.dev/variant"
	var (
		ns     string
		tenant client.Client
	)
	// replicaSets returns the Deployment web's ReplicaSets by the variant of
	// their template.
	replicaSets := func(ctx context.Context) (map[string]appsv1.ReplicaSet, error) {
		list := &appsv1.ReplicaSetList{}
		if err := cluster.Client().List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
			return nil, err
		}
		out := map[string]appsv1.ReplicaSet{}
		for _, rs := range list.Items {
			out[rs.Spec.Template.Labels[variantLabel]] = rs
		}
		return out, nil
	}

	BeforeAll(func(ctx context.Context) {
		w := requireWorkloads()
		ns = fmt.Sprintf("e2e-boundary-%d", nsCount.Add(1))
		c := cluster.Client()
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-sa"}})).To(Succeed())
		// A tenant with Kubernetes' own edit role in its namespace.
		Expect(c.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "tenant"}},
		})).To(Succeed())
		cfg, err := clientcmd.BuildConfigFromFlags("", cluster.KubeconfigPath())
		Expect(err).NotTo(HaveOccurred())
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant", Groups: []string{"system:authenticated"}}
		tenant, err = client.New(cfg, client.Options{Scheme: c.Scheme()})
		Expect(err).NotTo(HaveOccurred())

		By("the admin, whom the cluster's parameter allows, runs web as the canary variant")
		Expect(c.Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", variantLabel: "canary"}},
					Spec: corev1.PodSpec{
						ServiceAccountName:            "web-sa",
						AutomountServiceAccountToken:  ptr.To(false),
						TerminationGracePeriodSeconds: ptr.To(int64(1)),
						Containers: []corev1.Container{{Name: "probe", Image: w.ProbeImage, ImagePullPolicy: corev1.PullNever,
							Env: []corev1.EnvVar{{Name: "SPIFFE_ENDPOINT_SOCKET", Value: "unix:///run/spire/sockets/" + w.AgentSocketName}}}},
					},
				},
			},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			rs, err := replicaSets(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rs).To(HaveKey("canary"))
			g.Expect(rs["canary"].Status.ReadyReplicas).To(BeEquivalentTo(1))
		}, podTimeout, time.Second).Should(Succeed())
	})

	It("lets the deployment controller roll a labelled Deployment to another variant and scale its ReplicaSet up", func(ctx context.Context) {
		By("the admin moves web off canary")
		Expect(cluster.Client().Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"labels":{"`+variantLabel+`":"stable"}}}}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			rs, err := replicaSets(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rs).To(HaveKey("stable"))
			g.Expect(rs["stable"].Status.ReadyReplicas).To(BeEquivalentTo(1))
			g.Expect(*rs["canary"].Spec.Replicas).To(BeEquivalentTo(0))
		}, podTimeout, time.Second).Should(Succeed())

		By("the tenant scales the Deployment; the deployment controller raises the labelled ReplicaSet's replicas")
		scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
		Expect(tenant.SubResource("scale").Update(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}},
			client.WithSubResourceBody(scale))).To(Succeed())
		Eventually(func(g Gomega) {
			rs, err := replicaSets(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rs["stable"].Status.ReadyReplicas).To(BeEquivalentTo(2))
		}, podTimeout, time.Second).Should(Succeed())
	})
})
