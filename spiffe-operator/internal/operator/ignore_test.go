package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// labelNamespace sets (or, with value "", removes) a label of namespace name.
func labelNamespace(name, key, value string) {
	GinkgoHelper()
	ns := &corev1.Namespace{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
	patch := client.MergeFrom(ns.DeepCopy())
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	if value == "" {
		delete(ns.Labels, key)
	} else {
		ns.Labels[key] = value
	}
	Expect(k8s.Patch(ctx, ns, patch)).To(Succeed())
}

var _ = Describe("Ignored namespaces", Ordered, func() {
	BeforeAll(func() {
		// Whoever may label namespaces labels kube-system like a tenant's.
		sys := deployment("kube-system", "ignore-sys", "ignore-sys", nil)
		labelNamespace("kube-system", "test", "ignore")
		DeferCleanup(func() {
			labelNamespace("kube-system", "test", "")
			Expect(k8s.Delete(ctx, sys)).To(Succeed())
		})
		namespace("ignore-a", map[string]string{"test": "ignore"})
		namespace("kube-system-not", map[string]string{"test": "ignore"})
		deployment("ignore-a", "web", "web", nil)
		deployment("kube-system-not", "web", "web", nil)
	})

	It("are never selected by default, whatever their labels, and only by exact name", func() {
		p := policyFor("ignore", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		Expect(p.Spec.IgnoreNamespaces).To(Equal(v1alpha1.DefaultIgnoreNamespaces()))
		Eventually(paths(parentOf("ignore"))).Should(Equal([]string{"/ns/ignore-a/sa/web", "/ns/kube-system-not/sa/web"}))
		Consistently(paths(parentOf("ignore")), resync).Should(Equal([]string{"/ns/ignore-a/sa/web", "/ns/kube-system-not/sa/web"}))
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("ignore"))).Should(BeEmpty())
		// The next spec reuses the name: wait for the finalizer to let go.
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)) }).Should(BeTrue())
	})

	It("can be emptied to select kube-system, and named to leave out others", func() {
		p := policyFor("ignore", func(s *v1alpha1.SpiffeRegistrationSpec) { s.IgnoreNamespaces = []string{} })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("ignore"))).Should(ContainElement("/ns/kube-system/sa/ignore-sys"))

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.IgnoreNamespaces = []string{"ignore-a"}
		Expect(k8s.Patch(ctx, p, patch)).To(Succeed())
		Eventually(paths(parentOf("ignore"))).Should(Equal([]string{"/ns/kube-system-not/sa/web", "/ns/kube-system/sa/ignore-sys"}))
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("ignore"))).Should(BeEmpty())
		// The next spec reuses the name: wait for the finalizer to let go.
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)) }).Should(BeTrue())
	})
})
