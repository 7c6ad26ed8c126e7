package shared_test

import (
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/shared"
)

var _ = Describe("Writer release refused by an admission policy", func() {
	ours := shared.Writer{FieldManager: "trustplane-test"}
	theirs := shared.Writer{FieldManager: "someone-else"}
	BeforeEach(func() { ours.Client, theirs.Client = cp.Client, cp.Client })

	It("is a failure to retry, not an object left in place for good", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "mutable", map[string]any{"theirs": "x"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "mutable", map[string]any{"ca": "ours"}), false)).To(Succeed())

		By("an administrator's change freeze on ConfigMaps of the namespace (a ValidatingAdmissionPolicy)")
		fail := admissionregistrationv1.Deny
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "freeze-" + ns},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptrTo(admissionregistrationv1.Fail),
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					},
				}}},
				Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "change freeze until Monday"}},
			},
		}
		Expect(cp.Client.Create(ctx, policy)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, policy) })
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "freeze-" + ns},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        policy.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{fail},
				MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
			},
		}
		Expect(cp.Client.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, binding) })
		Eventually(func() error {
			return theirs.Apply(ctx, configMap(ns, "probe", map[string]any{"n": time.Now().String()}), false)
		}, 20*time.Second).Should(HaveOccurred(), "the policy never took effect")

		_, err := ours.Release(ctx, metadataOf(ctx, ns, "mutable"))
		Expect(err).To(HaveOccurred())
		GinkgoWriter.Printf("release error: %v (Invalid: %v)\n", err, apierrors.IsInvalid(err))

		Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeFalse(),
			"a refusal by a policy that is lifted later was classed as an object the API server refuses without our fields: %v", err)
	})
})

func ptrTo[T any](v T) *T { return &v }
