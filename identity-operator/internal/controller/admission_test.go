package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

const setterGroup = "trustplane:identity-boundary-setters"

// impersonating returns a client acting as user in groups.
func impersonating(user string, groups ...string) client.Client {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// applyPolicyManifests creates every resource that
// config/policy/kustomization.yaml lists, unchanged; objects that exist
// already (another spec applied them) are left as they are.
func applyPolicyManifests(ctx context.Context) {
	dir := filepath.Join(testsupport.ModuleRoot(), "config", "policy")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	Expect(yaml.Unmarshal(data, &kustomization)).To(Succeed())
	Expect(kustomization.Resources).NotTo(BeEmpty())
	createManifests(ctx, dir, kustomization.Resources...)
}

// createManifests creates the one object of each file in dir, unchanged;
// objects that exist already are left as they are.
func createManifests(ctx context.Context, dir string, files ...string) {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f)
	}
	Expect(testenv.CreateManifests(ctx, k8s, paths...)).To(Succeed())
}

func pod(ns, name string, podLabels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: podLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.org/app:1"}}},
	}
}

func relabel(ctx context.Context, c client.Client, ns, name string, mutate func(map[string]string) map[string]string) error {
	p := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		return err
	}
	p.Labels = mutate(p.Labels)
	return c.Update(ctx, p)
}

var _ = Describe("Admission policy: the boundary label is platform controlled and immutable", Ordered, func() {
	var ns string
	var setter, dev client.Client
	// createLabelled creates, as the configured group, a pod with the
	// label, and deletes it.
	createLabelled := func(ctx context.Context) error {
		probe := pod(ns, "", map[string]string{v1alpha1.BoundaryLabel: "v1"})
		probe.GenerateName = "probe-"
		err := setter.Create(ctx, probe)
		if err == nil {
			Expect(k8s.Delete(ctx, probe)).To(Succeed())
		}
		return err
	}

	BeforeAll(func(ctx context.Context) {
		applyPolicyManifests(ctx)
		ns = newNamespace(ctx)
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}))).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-writer"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status", "pods/ephemeralcontainers", "pods/resize"}, Verbs: []string{"get", "list", "create", "update", "patch"}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-writer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "pod-writer"},
			Subjects: []rbacv1.Subject{
				{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: setterGroup},
				{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "app-devs"},
			},
		})).To(Succeed())
		setter = impersonating("platform", setterGroup)
		dev = impersonating("alice", "app-devs")

		By("waiting until the policy is enforced")
		Eventually(func() bool {
			probe := pod(ns, "", map[string]string{v1alpha1.BoundaryLabel: "v1"})
			probe.GenerateName = "probe-"
			err := dev.Create(ctx, probe)
			return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
		}, 30*time.Second, 250*time.Millisecond).Should(BeTrue())
		By("waiting until the immutability policy is enforced")
		Expect(k8s.Create(ctx, pod(ns, "immutability-probe", map[string]string{"app": "probe"}))).To(Succeed())
		Eventually(func() error {
			// Toggle the label, so that every attempt is a change.
			return relabel(ctx, k8s, ns, "immutability-probe", func(l map[string]string) map[string]string {
				if _, ok := l[v1alpha1.BoundaryLabel]; ok {
					delete(l, v1alpha1.BoundaryLabel)
				} else {
					l[v1alpha1.BoundaryLabel] = "v1"
				}
				return l
			})
		}, 30*time.Second, 250*time.Millisecond).Should(MatchError(ContainSubstring("immutable")))
	})

	It("lets the configured group create a pod with the label", func(ctx context.Context) {
		Expect(setter.Create(ctx, pod(ns, "labelled", map[string]string{v1alpha1.BoundaryLabel: "v1", "app": "web"}))).To(Succeed())
	})

	It("denies other users creating a pod with the label", func(ctx context.Context) {
		err := dev.Create(ctx, pod(ns, "sneaky", map[string]string{v1alpha1.BoundaryLabel: "v1"}))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("identity.trustplane.dev/variant"))
	})

	It("lets anyone create a pod without the label", func(ctx context.Context) {
		Expect(dev.Create(ctx, pod(ns, "plain", map[string]string{"app": "web"}))).To(Succeed())
	})

	It("denies changing the label, even for the configured group", func(ctx context.Context) {
		err := relabel(ctx, setter, ns, "labelled", func(l map[string]string) map[string]string { l[v1alpha1.BoundaryLabel] = "v2"; return l })
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("immutable"))
	})

	It("denies removing the label", func(ctx context.Context) {
		err := relabel(ctx, setter, ns, "labelled", func(l map[string]string) map[string]string { delete(l, v1alpha1.BoundaryLabel); return l })
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("immutable"))
	})

	It("denies adding the label to an existing pod", func(ctx context.Context) {
		for _, c := range []client.Client{dev, setter} {
			err := relabel(ctx, c, ns, "plain", func(l map[string]string) map[string]string { l[v1alpha1.BoundaryLabel] = "v1"; return l })
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("immutable"))
		}
	})

	// The API server keeps label changes made through pods/status (without
	// the policy a status update relabels the pod), so the policy covers
	// that subresource, and pods/resize and pods/ephemeralcontainers as well
	// in case their strategies ever keep metadata changes. Whatever the
	// route, the label must survive.
	DescribeTable("keeps the label through the subresources that carry the whole pod",
		func(ctx context.Context, subResource string, denied bool) {
			p := &corev1.Pod{}
			Expect(dev.Get(ctx, client.ObjectKey{Namespace: ns, Name: "labelled"}, p)).To(Succeed())
			p.Labels[v1alpha1.BoundaryLabel] = "v2"
			err := dev.SubResource(subResource).Update(ctx, p)
			if denied {
				Expect(err).To(MatchError(ContainSubstring("immutable")))
			}
			cur := &corev1.Pod{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "labelled"}, cur)).To(Succeed())
			Expect(cur.Labels).To(HaveKeyWithValue(v1alpha1.BoundaryLabel, "v1"), "update error: %v", err)
		},
		Entry("status: denied by the policy", "status", true),
		Entry("resize", "resize", false),
		Entry("ephemeralcontainers", "ephemeralcontainers", false),
	)

	It("allows other label changes on a labelled pod", func(ctx context.Context) {
		Expect(relabel(ctx, dev, ns, "labelled", func(l map[string]string) map[string]string { l["tier"] = "gold"; return l })).To(Succeed())
	})

	It("attack: swapping the image of a labelled pod's container in place, which runs other code with the pod's identity, is refused", func(ctx context.Context) {
		withInit := pod(ns, "labelled-init", map[string]string{v1alpha1.BoundaryLabel: "v1", "app": "web"})
		withInit.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "example.org/init:1"}}
		Expect(setter.Create(ctx, withInit)).To(Succeed())
		swapImage := func(c client.Client, name string, mutate func(*corev1.Pod)) error {
			p := &corev1.Pod{}
			Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
			mutate(p)
			return c.Update(ctx, p)
		}
		app := func(p *corev1.Pod) { p.Spec.Containers[0].Image = "example.org/evil:1" }
		initC := func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "example.org/evil:1" }
		for _, c := range []client.Client{dev, setter} {
			Expect(swapImage(c, "labelled", app)).To(MatchError(ContainSubstring("images")))
			Expect(swapImage(c, "labelled-init", initC)).To(MatchError(ContainSubstring("images")))
		}
		By("a JSON patch takes no other way")
		patch := []byte(`[{"op":"replace","path":"/spec/containers/0/image","value":"example.org/evil:1"}]`)
		Expect(dev.Patch(ctx, pod(ns, "labelled", nil), client.RawPatch(types.JSONPatchType, patch))).To(MatchError(ContainSubstring("images")))
		for name, want := range map[string]string{"labelled": "example.org/app:1", "labelled-init": "example.org/app:1"} {
			cur := &corev1.Pod{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur)).To(Succeed())
			Expect(cur.Spec.Containers[0].Image).To(Equal(want))
		}

		By("an unlabelled pod's image can still be changed")
		Expect(swapImage(dev, "plain", app)).To(Succeed())
	})

	It("a user outside the allowed principals cannot debug a labelled pod with an ephemeral container", func(ctx context.Context) {
		addDebugContainer := func(c client.Client, name, container string) error {
			p := &corev1.Pod{}
			Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: container, Image: "example.org/debug:1",
					TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}})
			return c.SubResource("ephemeralcontainers").Update(ctx, p)
		}
		Expect(addDebugContainer(dev, "labelled", "debug")).To(MatchError(ContainSubstring("ephemeral containers")))
		By("a strategic merge patch of the subresource, as kubectl debug sends, takes no other way")
		debugPatch := []byte(`{"spec":{"ephemeralContainers":[{"name":"debug-patch","image":"example.org/debug:1","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}]}}`)
		Expect(dev.SubResource("ephemeralcontainers").Patch(ctx, pod(ns, "labelled", nil), client.RawPatch(types.StrategicMergePatchType, debugPatch))).
			To(MatchError(ContainSubstring("ephemeral containers")))
		cur := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "labelled"}, cur)).To(Succeed())
		Expect(cur.Spec.EphemeralContainers).To(BeEmpty())

		By("an allowed principal may, and anyone may debug an unlabelled pod")
		Expect(addDebugContainer(setter, "labelled", "debug")).To(Succeed())
		Expect(addDebugContainer(dev, "plain", "debug")).To(Succeed())
	})

	// bundle-operator's token may create a ConfigMap labelled as a
	// TrustBundle's target in any namespace: parameters so labelled allow
	// no one, so that token cannot list itself while they are missing.
	It("refuses the configured group while the parameters carry a TrustBundle target's label", func(ctx context.Context) {
		params := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "trustplane-system", Name: "identity-boundary-admission"}, params)).To(Succeed())
		forged := params.DeepCopy()
		forged.ResourceVersion, forged.UID, forged.ManagedFields = "", "", nil
		forged.Labels = map[string]string{"bundle.trustplane.dev/trustbundle": "planted", "trustplane.dev/owner-uid": "3f1c0e7a-0000-4000-8000-00000000000c"}
		Expect(k8s.Delete(ctx, params)).To(Succeed())
		Expect(k8s.Create(ctx, forged)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(k8s.Delete(ctx, forged)).To(Succeed())
			params.ResourceVersion, params.UID = "", ""
			Expect(k8s.Create(ctx, params)).To(Succeed())
			Eventually(createLabelled).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		})
		Eventually(createLabelled).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(250 * time.Millisecond).
			Should(MatchError(ContainSubstring("may create pods with the identity.trustplane.dev/variant label")))
	})

	It("without the parameter, status updates of labelled pods still succeed and the label stays immutable", func(ctx context.Context) {
		params := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "trustplane-system", Name: "identity-boundary-admission"}, params)).To(Succeed())
		Expect(k8s.Delete(ctx, params)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			params.ResourceVersion, params.UID = "", ""
			Expect(k8s.Create(ctx, params)).To(Succeed())
		})
		By("waiting until labelled pod creation fails closed, which shows the deletion is seen")
		Eventually(createLabelled).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(250 * time.Millisecond).Should(HaveOccurred())

		By("ephemeral containers on labelled pods fail closed, even for an allowed principal")
		p := &corev1.Pod{}
		Expect(setter.Get(ctx, client.ObjectKey{Namespace: ns, Name: "labelled"}, p)).To(Succeed())
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug-without-parameter", Image: "example.org/debug:1",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}})
		Expect(setter.SubResource("ephemeralcontainers").Update(ctx, p)).To(MatchError(ContainSubstring("no params found")))

		By("unlabelled pods are not affected")
		Expect(dev.Create(ctx, pod(ns, "plain-without-parameter", map[string]string{"app": "web"}))).To(Succeed())

		By("workload writes fail closed: the parameter is resolved before the template is looked at")
		// Eventually: the workload policy may not be in force yet when this
		// spec runs right after the policies were created.
		Eventually(func() error {
			d := workloadKinds["Deployment"](ns, "", "")
			d.SetGenerateName("unlabelled-without-parameter-")
			err := k8s.Create(ctx, d)
			if err == nil {
				Expect(k8s.Delete(ctx, d)).To(Succeed())
			}
			return err
		}, 30*time.Second, 250*time.Millisecond).Should(MatchError(ContainSubstring("no params found")))

		By("a kubelet-style status update of the labelled pod succeeds")
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "labelled"}, p)).To(Succeed())
			p.Status.Message = "status written without the parameter"
			g.Expect(k8s.Status().Update(ctx, p)).To(Succeed())
		}).Should(Succeed())
		p = &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "labelled"}, p)).To(Succeed())
		Expect(p.Status.Message).To(Equal("status written without the parameter"))

		By("the label still cannot change, through the pod or its status")
		err := relabel(ctx, k8s, ns, "labelled", func(l map[string]string) map[string]string { l[v1alpha1.BoundaryLabel] = "v2"; return l })
		Expect(err).To(MatchError(ContainSubstring("immutable")))
		p.Labels[v1alpha1.BoundaryLabel] = "v2"
		Expect(k8s.Status().Update(ctx, p)).To(MatchError(ContainSubstring("immutable")))
	})
})
