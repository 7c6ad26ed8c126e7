package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// The full table of pool-selector rules is proved in internal/selector and
// internal/handler/identitybinding; here each failure condition is shown
// end to end against the API server, with no output written.
var _ = Describe("Rejections: any failure sets one failure condition and writes no output", func() {
	DescribeTable("failure rules",
		func(ctx context.Context, prepare func(ctx context.Context, ns string), opts []bindingOpt, variant, condType, reason string) {
			ns := newNamespace(ctx)
			prepare(ctx, ns)
			b := createBinding(ctx, ns, "bad", "serving", variant, opts...)
			Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(reason))
			Expect(failures(getBinding(ctx, ns, b.Name)(Default))).To(Equal([]string{condType + "=" + reason}))
			Consistently(entryExists(ctx, ns, b.Name), time.Second, 100*time.Millisecond).Should(BeFalse())
			Expect(clusterSPIFFEIDExists(ctx, ns, b.Name)()).To(BeFalse())
		},
		Entry("missing pool: InvalidRef TargetPoolNotFound",
			func(context.Context, string) {}, nil, "v1", v1alpha1.ConditionInvalidRef, v1alpha1.ReasonTargetPoolNotFound),
		Entry("unsupported pool kind: InvalidRef UnsupportedPoolKind",
			func(context.Context, string) {}, []bindingOpt{withPool("batch", "Job", "x")}, "v1", v1alpha1.ConditionInvalidRef, v1alpha1.ReasonUnsupportedPoolKind),
		Entry("pool with matchExpressions: UnsafeSelector InvalidPoolSelector",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", &metav1.LabelSelector{
					MatchLabels:      map[string]string{"app": "web"},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}},
				}, map[string]string{"app": "web", "tier": "x"})
			}, nil, "v1", v1alpha1.ConditionUnsafeSelector, v1alpha1.ReasonInvalidPoolSelector),
		Entry("missing variant: UnsafeSelector InvalidIdentityBoundary",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, nil, "", v1alpha1.ConditionUnsafeSelector, v1alpha1.ReasonInvalidIdentityBoundary),
		Entry("invalid variant: UnsafeSelector InvalidIdentityBoundary",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, nil, "not a label", v1alpha1.ConditionUnsafeSelector, v1alpha1.ReasonInvalidIdentityBoundary),
		Entry("pool selecting another variant: UnsafeSelector InvalidIdentityBoundary",
			func(ctx context.Context, ns string) {
				sel := map[string]string{"app": "web", v1alpha1.BoundaryLabel: "stable"}
				createDeployment(ctx, ns, "web", &metav1.LabelSelector{MatchLabels: sel}, sel)
			}, nil, "canary", v1alpha1.ConditionUnsafeSelector, v1alpha1.ReasonInvalidIdentityBoundary),
		Entry("invalid SPIFFE ID template: RenderFailure InvalidSPIFFEIDTemplate",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{withTemplate("ns/{unknown}")}, "v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonInvalidSPIFFEIDTemplate),
	)

	It("withdraws the outputs of a Ready binding whose pool goes away", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		Expect(entryExists(ctx, ns, b.Name)()).To(BeTrue())

		d := &metav1.PartialObjectMetadata{}
		d.SetGroupVersionKind(appsGVK("Deployment"))
		d.SetNamespace(ns)
		d.SetName("web")
		Expect(k8s.Delete(ctx, d)).To(Succeed())
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonTargetPoolNotFound))
		Eventually(entryExists(ctx, ns, b.Name)).Should(BeFalse())
		Eventually(clusterSPIFFEIDExists(ctx, ns, b.Name)).Should(BeFalse())
		Expect(getBinding(ctx, ns, b.Name)(Default).Status.Outputs).To(BeEmpty())
	}, SpecTimeout(time.Minute))
})
