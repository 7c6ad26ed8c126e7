package controller_test

import (
	"context"
	"fmt"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// boundaryEnforced returns the BoundaryEnforced condition of a binding as
// "<status>/<reason>: <message>", or "<none>".
func boundaryEnforced(ctx context.Context, ns, name string) func(Gomega) string {
	return func(g Gomega) string {
		c := meta.FindStatusCondition(getBinding(ctx, ns, name)(g).Status.Conditions, v1alpha1.ConditionBoundaryEnforced)
		if c == nil {
			return "<none>"
		}
		return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}
}

// The boundary rests on admission policies the operator cannot enforce
// itself; a platform that forgot one, or bound it to warn only, must be
// told on every binding. The suite installs the policies before the
// operator starts; this spec takes one binding of them away and brings it
// back, so it runs alone.
var _ = Describe("BoundaryEnforced: every binding says whether the identity boundary's admission policies are in force", Serial, func() {
	It("reports them in force, names a policy binding that is missing or only warns, says nothing is known while they cannot be read, and in force again, leaving the outputs alone", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		Eventually(boundaryEnforced(ctx, ns, name)).Should(HavePrefix("True/" + v1alpha1.ReasonAdmissionPoliciesInForce))

		const policy = "identity-boundary-immutable.trustplane.dev"
		key := client.ObjectKey{Name: policy}
		original := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		Expect(k8s.Get(ctx, key, original)).To(Succeed())
		restore := func(ctx context.Context, actions []admissionregistrationv1.ValidationAction) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				cur := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
				err := k8s.Get(ctx, key, cur)
				if apierrors.IsNotFound(err) {
					b := original.DeepCopy()
					b.ResourceVersion, b.UID = "", ""
					b.Spec.ValidationActions = actions
					g.Expect(k8s.Create(ctx, b)).To(Succeed())
					return
				}
				g.Expect(err).NotTo(HaveOccurred())
				cur.Spec.ValidationActions = actions
				g.Expect(k8s.Update(ctx, cur)).To(Succeed())
			}).Should(Succeed())
		}
		DeferCleanup(func(ctx context.Context) {
			restore(ctx, original.Spec.ValidationActions)
			Eventually(boundaryEnforced(ctx, ns, name)).Should(HavePrefix("True/"))
		})

		By("the binding of one policy deleted")
		Expect(k8s.Delete(ctx, original.DeepCopy())).To(Succeed())
		Eventually(boundaryEnforced(ctx, ns, name)).Should(And(
			HavePrefix("False/"+v1alpha1.ReasonAdmissionPoliciesMissing),
			ContainSubstring("binding "+policy+" is not installed"),
			ContainSubstring("install identity-operator/config/policy")))
		Expect(readyReason(ctx, ns, name)(Default)).To(Equal("True"))
		Expect(entryExists(ctx, ns, name)()).To(BeTrue())

		By("back, but only warning")
		restore(ctx, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn})
		Eventually(boundaryEnforced(ctx, ns, name)).Should(And(
			HavePrefix("False/"+v1alpha1.ReasonAdmissionPoliciesMissing),
			ContainSubstring("binding "+policy+" does not deny")))

		By("denying again")
		restore(ctx, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny})
		Eventually(boundaryEnforced(ctx, ns, name)).Should(HavePrefix("True/" + v1alpha1.ReasonAdmissionPoliciesInForce))
		Expect(readyReason(ctx, ns, name)(Default)).To(Equal("True"))

		By("the operator's role losing get on the policies: after a few failed reads, nothing is known")
		role := &rbacv1.ClusterRole{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: roleName(generatedRole())}, role)).To(Succeed())
		rules := role.DeepCopy().Rules
		DeferCleanup(func(ctx context.Context) {
			Eventually(func(g Gomega) {
				cur := &rbacv1.ClusterRole{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(role), cur)).To(Succeed())
				cur.Rules = rules
				g.Expect(k8s.Update(ctx, cur)).To(Succeed())
			}).Should(Succeed())
			Eventually(boundaryEnforced(ctx, ns, name)).Should(HavePrefix("True/"))
		})
		var kept []rbacv1.PolicyRule
		for _, r := range rules {
			if !slices.Contains(r.APIGroups, "admissionregistration.k8s.io") {
				kept = append(kept, r)
			}
		}
		Expect(kept).To(HaveLen(len(rules)-1), "the generated role has one rule on the policies")
		role.Rules = kept
		Expect(k8s.Update(ctx, role)).To(Succeed())
		Eventually(boundaryEnforced(ctx, ns, name)).Should(And(
			HavePrefix("Unknown/"+v1alpha1.ReasonAdmissionPoliciesUnreadable), ContainSubstring("forbidden")))
		Expect(readyReason(ctx, ns, name)(Default)).To(Equal("True"))
		role.Rules = rules
		Expect(k8s.Update(ctx, role)).To(Succeed())
		Eventually(boundaryEnforced(ctx, ns, name)).Should(HavePrefix("True/" + v1alpha1.ReasonAdmissionPoliciesInForce))

		By("a new binding is told at once, from what the operator last read")
		b := createBinding(ctx, ns, "second", "serving", "v2")
		Eventually(boundaryEnforced(ctx, ns, b.Name)).Should(HavePrefix("True/"))
	})
})
