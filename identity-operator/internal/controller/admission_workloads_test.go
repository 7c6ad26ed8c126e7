package controller_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// namedController is a user listed by name (allowedUsers) in the shipped
// parameter: the controller that creates a Deployment's ReplicaSets.
const namedController = "system:serviceaccount:kube-system:deployment-controller"

// podTemplate returns a pod template labelled app=name, plus the boundary
// label when variant is not empty.
func podTemplate(name, variant string) corev1.PodTemplateSpec {
	l := map[string]string{"app": name}
	if variant != "" {
		l[v1alpha1.BoundaryLabel] = variant
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "app", Image: "example.org/app:1"}},
		},
	}
}

// workloadKinds build an object of each kind the workload policy covers,
// whose pod template carries the given variant (none when empty).
var workloadKinds = map[string]func(ns, name, variant string) client.Object{
	"Deployment": func(ns, name, variant string) client.Object {
		t := podTemplate(name, variant)
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Selector: webSelector(name), Template: t}}
	},
	"StatefulSet": func(ns, name, variant string) client.Object {
		t := podTemplate(name, variant)
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.StatefulSetSpec{Selector: webSelector(name), Template: t}}
	},
	"DaemonSet": func(ns, name, variant string) client.Object {
		t := podTemplate(name, variant)
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DaemonSetSpec{Selector: webSelector(name), Template: t}}
	},
	"ReplicaSet": func(ns, name, variant string) client.Object {
		t := podTemplate(name, variant)
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.ReplicaSetSpec{Selector: webSelector(name), Template: t}}
	},
	"Job": func(ns, name, variant string) client.Object {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: batchv1.JobSpec{Template: podTemplate(name, variant)}}
	},
	"CronJob": func(ns, name, variant string) client.Object {
		return &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: batchv1.CronJobSpec{Schedule: "*/5 * * * *", JobTemplate: batchv1.JobTemplateSpec{
				Spec: batchv1.JobSpec{Template: podTemplate(name, variant)}}}}
	},
	"ReplicationController": func(ns, name, variant string) client.Object {
		t := podTemplate(name, variant)
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ReplicationControllerSpec{Selector: map[string]string{"app": name}, Template: &t}}
	},
}

var _ = Describe("Admission policy: workload pod templates pick no variant unless an allowed principal wrote them", Ordered, func() {
	var ns string
	var setter, named, dev client.Client

	BeforeAll(func(ctx context.Context) {
		applyPolicyManifests(ctx)
		ns = newNamespace(ctx)
		Expect(k8s.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "workload-writer"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets", "replicasets"}, Verbs: []string{"get", "create", "update", "patch"}},
				{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: []string{"get", "create", "update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"replicationcontrollers"}, Verbs: []string{"get", "create", "update", "patch"}},
			},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "workload-writer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "workload-writer"},
			Subjects: []rbacv1.Subject{
				{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: setterGroup},
				{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "app-devs"},
				{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "app-leads"},
				{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: namedController},
			},
		})).To(Succeed())
		setter = impersonating("platform", setterGroup)
		named = impersonating(namedController)
		dev = impersonating("alice", "app-devs")

		By("waiting until the workload policy is enforced")
		Eventually(func() bool {
			probe := workloadKinds["Deployment"](ns, "", "v1")
			probe.SetGenerateName("probe-")
			err := dev.Create(ctx, probe)
			if err == nil {
				Expect(k8s.Delete(ctx, probe)).To(Succeed())
			}
			return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
		}, 30*time.Second, 250*time.Millisecond).Should(BeTrue(), "a Deployment with a labelled template was admitted for alice")
	})

	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "ReplicationController"} {
		It("a user outside the allowed principals cannot pick a variant through a "+kind+"'s pod template", func(ctx context.Context) {
			build := workloadKinds[kind]
			err := dev.Create(ctx, build(ns, "dev-"+strings.ToLower(kind), "v1"))
			Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "want a denial, got %v", err)
			Expect(err.Error()).To(ContainSubstring(v1alpha1.BoundaryLabel))

			By("an allowed group, and a user allowed by name, can")
			Expect(setter.Create(ctx, build(ns, "group-"+strings.ToLower(kind), "v1"))).To(Succeed())
			Expect(named.Create(ctx, build(ns, "named-"+strings.ToLower(kind), "v1"))).To(Succeed())

			By("anyone can create the kind without the label")
			Expect(dev.Create(ctx, build(ns, "plain-"+strings.ToLower(kind), ""))).To(Succeed())
		})
	}

	It("a user outside the allowed principals cannot add the label to, or change it in, an existing template", func(ctx context.Context) {
		setTemplateLabel := func(c client.Client, name, variant string) error {
			d := &appsv1.Deployment{}
			Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d)).To(Succeed())
			d.Spec.Template.Labels[v1alpha1.BoundaryLabel] = variant
			return c.Update(ctx, d)
		}
		Expect(setTemplateLabel(dev, "plain-deployment", "v1")).To(MatchError(ContainSubstring(v1alpha1.BoundaryLabel)))
		Expect(setTemplateLabel(dev, "group-deployment", "v2")).To(MatchError(ContainSubstring(v1alpha1.BoundaryLabel)))
		Expect(setTemplateLabel(setter, "group-deployment", "v2")).To(Succeed())
	})

	It("a user outside the allowed principals cannot change a labelled template, but may change the rest of the workload", func(ctx context.Context) {
		d := &appsv1.Deployment{}
		Expect(dev.Get(ctx, client.ObjectKey{Namespace: ns, Name: "group-deployment"}, d)).To(Succeed())
		d.Spec.Template.Spec.Containers[0].Image = "example.org/other:1"
		Expect(dev.Update(ctx, d)).To(MatchError(ContainSubstring(v1alpha1.BoundaryLabel)))

		Expect(dev.Get(ctx, client.ObjectKey{Namespace: ns, Name: "group-deployment"}, d)).To(Succeed())
		replicas := int32(3)
		d.Spec.Replicas = &replicas
		Expect(dev.Update(ctx, d)).To(Succeed())
	})

	It("a user outside the allowed principals cannot add the label by patch, nor into a CronJob's nested job template", func(ctx context.Context) {
		labelPatch := []byte(`{"spec":{"template":{"metadata":{"labels":{"` + v1alpha1.BoundaryLabel + `":"v1"}}}}}`)
		for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController"} {
			obj := workloadKinds[kind](ns, "plain-"+strings.ToLower(kind), "")
			err := dev.Patch(ctx, obj, client.RawPatch(types.MergePatchType, labelPatch))
			Expect(err).To(MatchError(ContainSubstring(v1alpha1.BoundaryLabel)), kind)
		}

		cronPatch := []byte(`{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"labels":{"` + v1alpha1.BoundaryLabel + `":"v1"}}}}}}}`)
		cron := workloadKinds["CronJob"](ns, "plain-cronjob", "")
		Expect(dev.Patch(ctx, cron, client.RawPatch(types.MergePatchType, cronPatch))).To(MatchError(ContainSubstring(v1alpha1.BoundaryLabel)))
		By("nor change the image of a labelled CronJob's job template, by JSON patch")
		imagePatch := []byte(`[{"op":"replace","path":"/spec/jobTemplate/spec/template/spec/containers/0/image","value":"example.org/other:1"}]`)
		labelled := workloadKinds["CronJob"](ns, "group-cronjob", "")
		Expect(dev.Patch(ctx, labelled, client.RawPatch(types.JSONPatchType, imagePatch))).To(MatchError(ContainSubstring(v1alpha1.BoundaryLabel)))
		Expect(setter.Patch(ctx, labelled, client.RawPatch(types.JSONPatchType, imagePatch))).To(Succeed())
	})

	It("reads the parameter's lists with the spaces around entries trimmed", func(ctx context.Context) {
		params := &corev1.ConfigMap{}
		key := client.ObjectKey{Namespace: "trustplane-system", Name: "identity-boundary-admission"}
		Expect(k8s.Get(ctx, key, params)).To(Succeed())
		original := params.Data["allowedGroups"]
		DeferCleanup(func(ctx context.Context) {
			Eventually(func(g Gomega) {
				cur := &corev1.ConfigMap{}
				g.Expect(k8s.Get(ctx, key, cur)).To(Succeed())
				cur.Data["allowedGroups"] = original
				g.Expect(k8s.Update(ctx, cur)).To(Succeed())
			}).Should(Succeed())
		})
		params.Data["allowedGroups"] = "  app-leads ,\n " + original + " "
		Expect(k8s.Update(ctx, params)).To(Succeed())
		lead := impersonating("bob", "app-leads")
		Eventually(func() error {
			d := workloadKinds["Deployment"](ns, "", "v1")
			d.SetGenerateName("lead-")
			return lead.Create(ctx, d)
		}, 30*time.Second, 250*time.Millisecond).Should(Succeed())
		Expect(setter.Create(ctx, workloadKinds["Deployment"](ns, "group-after-trim", "v1"))).To(Succeed())
	})
})
