package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

var _ = Describe("Cache: pools are kept without their pod templates", func() {
	It("keeps a Deployment's and a StatefulSet's selector and drops the template", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: appsv1.StatefulSetSpec{Selector: webSelector("db"), Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "example.org/db:1"}}},
			}},
		}
		Expect(k8s.Create(ctx, sts)).To(Succeed())
		createBinding(ctx, ns, "db", "serving", "primary", withPool("", v1alpha1.StatefulSetKind, "db"))
		Eventually(readyReason(ctx, ns, "db")).Should(Equal("True"))

		d := &appsv1.Deployment{}
		Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d)).To(Succeed())
		Expect(d.Spec.Selector).To(Equal(webSelector("web")))
		Expect(d.Spec.Template).To(Equal(corev1.PodTemplateSpec{}))
		Expect(d.ManagedFields).To(BeEmpty())
		s := &appsv1.StatefulSet{}
		Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db"}, s)).To(Succeed())
		Expect(s.Spec.Selector).To(Equal(webSelector("db")))
		Expect(s.Spec.Template).To(Equal(corev1.PodTemplateSpec{}))

		By("the API server still holds the template")
		full := &appsv1.Deployment{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, full)).To(Succeed())
		Expect(full.Spec.Template.Spec.Containers).NotTo(BeEmpty())
	}, SpecTimeout(time.Minute))
})
