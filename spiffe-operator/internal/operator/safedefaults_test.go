package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

var _ = Describe("Admin and downstream entries", func() {
	oneNamespace := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.NamespaceNameLabel: name}}
	}

	It("are refused at admission unless the policy selects one namespace by name and one service account", func() {
		for name, mut := range map[string]func(*v1alpha1.SpiffeRegistrationSpec){
			"label-selected namespaces": func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.Admin, s.ServiceAccountName = true, "ops"
			},
			"no namespace selector": func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.Downstream, s.ServiceAccountName, s.NamespaceSelector = true, "ops", nil
			},
			"no service account": func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.Admin, s.NamespaceSelector = true, oneNamespace("admin-a")
			},
			"the name only in matchExpressions": func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.Admin, s.ServiceAccountName = true, "ops"
				s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: v1alpha1.NamespaceNameLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"admin-a", "admin-b"}}}}
			},
		} {
			p := policyFor("admin-refused", mut)
			err := k8s.Create(ctx, p)
			Expect(err).To(MatchError(ContainSubstring("admin and downstream need a policy that selects one namespace by name")), name)
		}
	})

	It("go only to the workloads of the named service account in the named namespace, "+
		"not to another account's workload a tenant creates there, nor to a namespace labelled like it", func() {
		namespace("admin-a", nil)
		// A tenant's namespace cannot claim the name label of another: the API server sets it.
		evil := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "admin-evil",
			Labels: map[string]string{v1alpha1.NamespaceNameLabel: "admin-a"}}}
		Expect(k8s.Create(ctx, evil)).To(Succeed())
		Expect(evil.Labels[v1alpha1.NamespaceNameLabel]).To(Equal("admin-evil"))
		deployment("admin-a", "ops", "ops", nil)
		deployment("admin-a", "tenant", "tenant", nil)
		deployment("admin-evil", "ops", "ops", nil)
		p := policyFor("admin-ok", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Admin, s.Downstream, s.ServiceAccountName = true, true, "ops"
			s.NamespaceSelector = oneNamespace("admin-a")
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("admin-ok"))).Should(Equal([]string{"/ns/admin-a/sa/ops"}))
		e := entryAt(parentOf("admin-ok"), "/ns/admin-a/sa/ops")
		Expect(e.Admin).To(BeTrue())
		Expect(e.Downstream).To(BeTrue())
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Expect(p.Status.WorkloadsSelected).To(BeEquivalentTo(1))

		// Moving the tenant's workload to the admin account is what it takes,
		// and RBAC on the account decides who may do that.
		d := deployment("admin-a", "late", "tenant", nil)
		Consistently(paths(parentOf("admin-ok")), resync).Should(Equal([]string{"/ns/admin-a/sa/ops"}))
		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Template.Spec.ServiceAccountName = "ops"
		Expect(k8s.Patch(ctx, d, patch)).To(Succeed())
		Eventually(func() int32 {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return p.Status.WorkloadsSelected
		}).Should(BeEquivalentTo(2))
	})
})
