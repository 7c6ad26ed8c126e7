package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// The full table of pool-selector rules is proved in internal/selector and
// internal/handler/identitybinding; here each failure condition is shown
// end to end against the API server, with no output written.
// What admission can check, the CRD checks (OpenAPI and CEL), so the user
// hears at once. The variant is left to the operator on purpose: a missing
// or invalid one must show as UnsafeSelector/InvalidIdentityBoundary.
var _ = Describe("CRD validation: admission refuses what it can check", func() {
	DescribeTable("refused at admission",
		func(ctx context.Context, mutate func(*v1alpha1.IdentityBinding), wantMessage string) {
			b := &v1alpha1.IdentityBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "invalid-"},
				Spec: v1alpha1.IdentityBindingSpec{
					PoolRef:            v1alpha1.PoolReference{Name: "web"},
					ServiceAccountName: "serving",
					IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: "v1"},
				},
			}
			mutate(b)
			err := k8s.Create(ctx, b)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(wantMessage))
		},
		Entry("an unsupported pool kind", func(b *v1alpha1.IdentityBinding) {
			b.Spec.PoolRef.Kind = "Job"
		}, "spec.poolRef.kind"),
		Entry("a group that does not go with the kind", func(b *v1alpha1.IdentityBinding) {
			b.Spec.PoolRef = v1alpha1.PoolReference{Group: "batch", Kind: v1alpha1.DeploymentKind, Name: "web"}
		}, "poolRef.group must be"),
		Entry("the apps group for an InferencePool", func(b *v1alpha1.IdentityBinding) {
			b.Spec.PoolRef.Group = v1alpha1.AppsGroup
		}, "poolRef.group must be"),
		Entry("a pool name that is not a DNS subdomain", func(b *v1alpha1.IdentityBinding) {
			b.Spec.PoolRef.Name = "Web_Pool"
		}, "spec.poolRef.name"),
		Entry("an empty service account", func(b *v1alpha1.IdentityBinding) {
			b.Spec.ServiceAccountName = ""
		}, "spec.serviceAccountName"),
		Entry("a service account that is not a DNS subdomain", func(b *v1alpha1.IdentityBinding) {
			b.Spec.ServiceAccountName = "Serving:x"
		}, "spec.serviceAccountName"),
		Entry("a negative X509-SVID TTL", func(b *v1alpha1.IdentityBinding) {
			b.Spec.X509SVIDTTL = &metav1.Duration{Duration: -time.Hour}
		}, "x509SVIDTTL must not be negative"),
		Entry("a negative JWT-SVID TTL", func(b *v1alpha1.IdentityBinding) {
			b.Spec.JWTSVIDTTL = &metav1.Duration{Duration: -time.Minute}
		}, "jwtSVIDTTL must not be negative"),
	)

	It("accepts every valid kind and group pairing, and leaves the variant to the operator", func(ctx context.Context) {
		for _, ref := range []v1alpha1.PoolReference{
			{Name: "p"},
			{Group: v1alpha1.InferencePoolGroup, Kind: v1alpha1.InferencePoolKind, Name: "p"},
			{Kind: v1alpha1.DeploymentKind, Name: "p"},
			{Group: v1alpha1.AppsGroup, Kind: v1alpha1.StatefulSetKind, Name: "p"},
		} {
			b := &v1alpha1.IdentityBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "valid-"},
				Spec:       v1alpha1.IdentityBindingSpec{PoolRef: ref, ServiceAccountName: "serving"},
			}
			Expect(k8s.Create(ctx, b, client.DryRunAll)).To(Succeed(), "%+v", ref)
		}
	})
})

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
			st := getBinding(ctx, ns, b.Name)(Default).Status
			Expect(st.SPIFFEID).To(BeEmpty(), "status.spiffeID is set only while Ready")
			Expect(st.Selectors).To(BeEmpty())
			Expect(st.SelectorFingerprint).To(BeEmpty())
		},
		Entry("missing pool: InvalidRef TargetPoolNotFound",
			func(context.Context, string) {}, nil, "v1", v1alpha1.ConditionInvalidRef, v1alpha1.ReasonTargetPoolNotFound),
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
				// An InferencePool has no pod template, so the workload
				// admission policy has nothing to refuse here.
				Expect(k8s.Create(ctx, inferencePool(ns, "web", map[string]any{"app": "web", v1alpha1.BoundaryLabel: "stable"}))).To(Succeed())
			}, []bindingOpt{withPool("", v1alpha1.InferencePoolKind, "web")}, "canary", v1alpha1.ConditionUnsafeSelector, v1alpha1.ReasonInvalidIdentityBoundary),
		Entry("an X509-SVID TTL above --max-svid-ttl: RenderFailure SVIDTTLTooLong",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{func(b *v1alpha1.IdentityBinding) { b.Spec.X509SVIDTTL = &metav1.Duration{Duration: 25 * time.Hour} }},
			"v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonSVIDTTLTooLong),
		Entry("a JWT-SVID TTL above --max-svid-ttl: RenderFailure SVIDTTLTooLong",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{func(b *v1alpha1.IdentityBinding) {
				b.Spec.JWTSVIDTTL = &metav1.Duration{Duration: 24*time.Hour + time.Second}
			}},
			"v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonSVIDTTLTooLong),
		Entry("attack: an X509-SVID TTL under a second, which SPIRE would read as 0, its own default: RenderFailure InvalidSVIDTTL",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{func(b *v1alpha1.IdentityBinding) { b.Spec.X509SVIDTTL = &metav1.Duration{Duration: time.Nanosecond} }},
			"v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonInvalidSVIDTTL),
		Entry("attack: a JWT-SVID TTL of a fraction of a second, cut to 0 (SPIRE's default): RenderFailure InvalidSVIDTTL",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{func(b *v1alpha1.IdentityBinding) {
				b.Spec.JWTSVIDTTL = &metav1.Duration{Duration: 500 * time.Millisecond}
			}},
			"v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonInvalidSVIDTTL),
		Entry("a TTL that is not a whole number of seconds: RenderFailure InvalidSVIDTTL",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{func(b *v1alpha1.IdentityBinding) {
				b.Spec.X509SVIDTTL = &metav1.Duration{Duration: 90*time.Second + time.Millisecond}
			}},
			"v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonInvalidSVIDTTL),
		Entry("invalid SPIFFE ID template: RenderFailure InvalidSPIFFEIDTemplate",
			func(ctx context.Context, ns string) {
				createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
			}, []bindingOpt{withTemplate("ns/{unknown}")}, "v1", v1alpha1.ConditionRenderFailure, v1alpha1.ReasonInvalidSPIFFEIDTemplate),
	)

	It("withdraws the outputs of a Ready binding whose pool goes away", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)

		d := &metav1.PartialObjectMetadata{}
		d.SetGroupVersionKind(appsGVK("Deployment"))
		d.SetNamespace(ns)
		d.SetName("web")
		Expect(k8s.Delete(ctx, d)).To(Succeed())
		Eventually(readyReason(ctx, ns, name)).Should(Equal(v1alpha1.ReasonTargetPoolNotFound))
		Eventually(entryExists(ctx, ns, name)).Should(BeFalse())
		Eventually(clusterSPIFFEIDExists(ctx, ns, name)).Should(BeFalse())
		// The withdrawing pass writes its status after the deletes.
		Eventually(func(g Gomega) []v1alpha1.OutputReference { return getBinding(ctx, ns, name)(g).Status.Outputs }).Should(BeEmpty())
	}, SpecTimeout(time.Minute))
})
