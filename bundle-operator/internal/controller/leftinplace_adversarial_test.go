package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// A release the target policy refuses for what a tenant wrote is left in
// place (shared.Writer Policies), and the TrustBundle's deletion goes on. A
// refusal by the target policy that says nothing about the object (the
// policy or its binding misconfigured, here bound with parameters that are
// not there) meets every target in every namespace alike and is lifted once
// fixed: it must hold the finalizer and be retried, not leave every
// namespace's CA key and target labels behind for good.
var _ = Describe("A TrustBundle deleted while the target policy is misconfigured", Serial, func() {
	It("keeps its finalizer and retries rather than leaving every namespace's target in place for good", func(ctx context.Context) {
		group := unique("atk-misconf")
		platform := newNamespace(ctx, map[string]string{"group": group})
		other := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, inline(testpki.ValidCA("atk-misconf").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		for _, ns := range []string{platform, other} {
			Eventually(func() string { return caData(ctx, ns) }).ShouldNot(BeEmpty())
		}
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		By("an administrator's change to the target policy's binding: parameters that do not exist yet")
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: target.TargetPolicy}, policy)).To(Succeed())
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: target.TargetPolicy}, binding)).To(Succeed())
		Expect(cp.Client.Patch(ctx, policy, mergePatch(`{"spec":{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"}}}`))).To(Succeed())
		Expect(cp.Client.Patch(ctx, binding, mergePatch(`{"spec":{"paramRef":{"name":"not-there-yet","parameterNotFoundAction":"Deny"}}}`))).To(Succeed())
		asOperator, err := client.New(operatorConfig, client.Options{Scheme: cp.Client.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		restored := false
		restore := func(ctx context.Context) {
			if restored {
				return
			}
			restored = true
			Expect(cp.Client.Patch(ctx, binding, mergePatch(`{"spec":{"paramRef":null}}`))).To(Succeed())
			Expect(cp.Client.Patch(ctx, policy, mergePatch(`{"spec":{"paramKind":null}}`))).To(Succeed())
			probe := unique("probe")
			Eventually(func() error {
				return asOperator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: probe}})
			}, 30*time.Second, 200*time.Millisecond).Should(MatchError(ContainSubstring("creates only TrustBundle targets")))
		}
		DeferCleanup(restore)
		probe := unique("probe")
		Eventually(func() error {
			return asOperator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: probe}})
		}, 30*time.Second, 200*time.Millisecond).Should(MatchError(ContainSubstring("no params found")))

		By("the TrustBundle is deleted meanwhile")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Consistently(func() error {
			return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{})
		}, 8*time.Second, 500*time.Millisecond).Should(Succeed(), func() string {
			return fmt.Sprintf("the TrustBundle is gone while the releases it needs were refused by a misconfigured policy; CA key left in %s: %t, in %s: %t",
				platform, caData(ctx, platform) != "", other, caData(ctx, other) != "")
		})

		By("once the policy is fixed, the release is retried and completes")
		restore(ctx)
		Eventually(func() error {
			return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{})
		}, 30*time.Second).ShouldNot(Succeed())
		for _, ns := range []string{platform, other} {
			Expect(configMap(ctx, ns, "ca")).To(BeNil(), "the target in %s is released", ns)
		}
	})
})
