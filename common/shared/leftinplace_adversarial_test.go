package shared_test

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/shared"
	"github.com/trustplane/trustplane/common/testenv"
)

// Writer.Policies: a release refused by one of the writer's own policies is
// left in place for good (ErrLeftInPlace, not retried until the object
// changes, its owner's deletion goes on), on the ground that such a policy
// refuses a release only for what another writer put in the object. These
// specs hold that only the writer's own policy judging the object is left
// in place: not another policy whose message quotes the object, nor the
// writer's own policy failing to judge.
var _ = Describe("Writer release refusals that are not its own policy judging the object", func() {
	// Another policy (an administrator's change freeze, say) whose message
	// echoes what the object holds: a tenant who writes the object chooses
	// an annotation value that reads like the writer's own policy's
	// refusal. Object names and keys cannot carry "'" or a space, but
	// annotation values (and data) can, and an administrator's
	// messageExpression, or a webhook's message, may quote them.
	It("does not leave in place an object another policy refuses whose message echoes tenant content naming the writer's policy", func(ctx context.Context) {
		ns, own, ours, theirs := writersWithOwnPolicy(ctx)
		Expect(ours.Apply(ctx, configMap(ns, "shared", map[string]any{"ca": "ours"}), false)).To(Succeed())
		tenant := configMap(ns, "shared", map[string]any{"theirs": "x"})
		tenant.SetAnnotations(map[string]string{"note": "ValidatingAdmissionPolicy '" + own + "' says hi"})
		Expect(theirs.Apply(ctx, tenant, false)).To(Succeed())

		By("an administrator's change freeze, reason Forbidden, whose message quotes an annotation of the object")
		freeze := "freeze-" + ns
		denyConfigMapWrites(ctx, freeze, ns, testenv.Refusal{Expression: "false", Message: "change freeze", Reason: string(metav1.StatusReasonForbidden),
			MessageExpression: `'change freeze until Monday (note: ' + object.metadata.?annotations[?'note'].orValue('') + ')'`},
			"UPDATE", "DELETE")
		waitRefusing(ctx, theirs, ns)

		_, err := ours.Release(ctx, metadataOf(ctx, ns, "shared"))
		Expect(err).To(HaveOccurred())
		GinkgoWriter.Printf("release error: %v\n", err)
		Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+freeze+"'")), "the freeze is what refused it")
		Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeFalse(),
			"a change freeze (lifted later) was classed as the writer's own policy refusing the object for good, because its message quotes tenant content: %v", err)
	})

	// The writer's own policy refusing for a reason that is not the
	// object's state: a configuration error of the policy or its binding
	// (here, a binding whose parameters are not there yet), which is
	// lifted once it is fixed. Every release in every namespace is refused
	// the same way, so classing it as left in place lets an owner's
	// deletion go on and leave all its children behind, never released.
	It("does not leave in place an object its own policy refuses for a configuration error rather than the object's state", func(ctx context.Context) {
		ns, own, ours, theirs := writersWithOwnPolicy(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "shared", map[string]any{"theirs": "x"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "shared", map[string]any{"ca": "ours"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "sole", map[string]any{"ca": "ours"}), false)).To(Succeed())

		By("the writer's own policy, bound with parameters that do not exist (yet)")
		ownPolicyMissingParams(ctx, own, ns)
		waitRefusing(ctx, theirs, ns)

		for _, name := range []string{"shared", "sole"} {
			_, err := ours.Release(ctx, metadataOf(ctx, ns, name))
			Expect(err).To(HaveOccurred())
			GinkgoWriter.Printf("%s: release error: %v\n", name, err)
			Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeFalse(),
				"%s: a refusal that says nothing about the object (the policy's binding is misconfigured) was classed as left in place for good: %v", name, err)
		}
	})
})

// ownPolicyMissingParams creates a ValidatingAdmissionPolicy name (taking
// ConfigMap parameters) that would admit every write, bound in ns to a
// parameter ConfigMap that does not exist with parameterNotFoundAction
// Deny, and removes both at the end of the spec.
func ownPolicyMissingParams(ctx context.Context, name, ns string) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true", Message: "never refused for the object's state"}},
		},
	}
	Expect(cp.Client.Create(ctx, policy)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, policy) })
	deny := admissionregistrationv1.DenyAction
	bindInNamespace(ctx, name, ns, &admissionregistrationv1.ParamRef{
		Name: "not-there-yet", Namespace: ns, ParameterNotFoundAction: &deny})
}

// bindInNamespace binds policy name, with params, to the objects of ns,
// and removes the binding at the end of the spec.
func bindInNamespace(ctx context.Context, name, ns string, params *admissionregistrationv1.ParamRef) {
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ParamRef:          params,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	Expect(cp.Client.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, binding) })
}
