package controller_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// refuseClusterSPIFFEIDs installs, until the spec ends, a
// ValidatingAdmissionPolicy (and its binding) that refuses the operations
// on ClusterSPIFFEIDs for which expression is false, with reason (Invalid,
// or Forbidden as a denying webhook answers).
func refuseClusterSPIFFEIDs(ctx context.Context, policyName string, operations []string, reason, expression string) {
	GinkgoHelper()
	created, err := testenv.RefuseWrites(ctx, k8s, testenv.Refusal{Name: policyName, Group: "spire.spiffe.io", Resource: "clusterspiffeids",
		Operations: operations, Expression: expression, Reason: reason, Message: "refused by the spec"})
	for _, obj := range created {
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, obj))).To(Succeed()) })
	}
	Expect(err).NotTo(HaveOccurred())
}

// clusterSPIFFEIDNamed returns a ClusterSPIFFEID named name, as a probe of
// what the API server accepts.
func clusterSPIFFEIDNamed(name string) *unstructured.Unstructured {
	probe := output.New(output.KindClusterSPIFFEID).(*unstructured.Unstructured)
	probe.SetName(name)
	Expect(unstructured.SetNestedField(probe.Object, "spiffe://example.org/probe", "spec", "spiffeIDTemplate")).To(Succeed())
	return probe
}

var _ = Describe("A pass that fails after writing some of its outputs", func() {
	// The outputs are written one kind after another (SpiffeEntry, then
	// ClusterSPIFFEID here). When the API server refuses the second, the
	// binding fails, and a failing binding keeps no output: the first,
	// written by the same pass, goes too.
	It("keeps none of them", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		name := output.Name(ns, "web")
		refuseClusterSPIFFEIDs(ctx, "refuse-"+name, []string{"CREATE", "UPDATE"}, "Invalid", fmt.Sprintf("object.metadata.name != '%s'", name))
		Eventually(func() bool {
			return apierrors.IsInvalid(k8s.Create(ctx, clusterSPIFFEIDNamed(name), client.DryRunAll))
		}).WithTimeout(time.Minute).Should(BeTrue(), "the policy does not refuse yet")

		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Expect(findMessage(getBinding(ctx, ns, b.Name)(Default), v1alpha1.ConditionRenderFailure)).To(
			And(ContainSubstring("refused by the spec"), ContainSubstring("no output is kept")))
		Expect(entryExists(ctx, ns, b.Name)()).To(BeFalse(), "the SpiffeEntry the failing pass wrote is still there")
		Expect(clusterSPIFFEIDExists(ctx, ns, b.Name)()).To(BeFalse())
		Consistently(entryExists(ctx, ns, b.Name), 2*time.Second, 100*time.Millisecond).Should(BeFalse())
	}, SpecTimeout(2*time.Minute))
})

var _ = Describe("An output the API server refuses", func() {
	// A Ready binding (both kinds) changes its spec, and the API server
	// refuses the new ClusterSPIFFEID: as Invalid (a schema or a policy),
	// or as Forbidden (a denying admission webhook answers 403). Either
	// way the binding keeps no output rendered from the old spec.
	DescribeTable("leaves the binding failing with no output", func(ctx context.Context, reason string) {
		ns, name := readyWebBinding(ctx)
		Eventually(clusterSPIFFEIDExists(ctx, ns, name)).Should(BeTrue())
		out := output.Name(ns, name)
		refuseClusterSPIFFEIDs(ctx, "refuse-update-"+out, []string{"UPDATE"}, reason, fmt.Sprintf("object.metadata.name != '%s'", out))
		Eventually(func() string {
			cur := output.New(output.KindClusterSPIFFEID).(*unstructured.Unstructured)
			if err := k8s.Get(ctx, client.ObjectKey{Name: out}, cur); err != nil {
				return err.Error()
			}
			return string(apierrors.ReasonForError(k8s.Update(ctx, cur, client.DryRunAll)))
		}).WithTimeout(time.Minute).Should(Equal(reason), "the policy does not refuse yet")

		Eventually(func(g Gomega) {
			b := getBinding(ctx, ns, name)(g)
			b.Spec.SPIFFEIDPathTemplate = "ns/{namespace}/sa/{serviceAccount}/renamed"
			g.Expect(k8s.Update(ctx, b)).To(Succeed())
		}).Should(Succeed())
		// The refused update withdraws both outputs; creates are not
		// refused, so the next pass writes them anew from the new spec.
		// Until then the binding is failing and keeps none: never does an
		// output of the old spec stay beside a failing or renamed binding.
		Eventually(func(g Gomega) {
			cur := getBinding(ctx, ns, name)(g)
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			if !entryExists(ctx, ns, name)() {
				g.Expect(readyReasonOf(cur)).NotTo(Equal("True"), "Ready without a SpiffeEntry")
				g.Expect(clusterSPIFFEIDExists(ctx, ns, name)()).To(BeFalse(), "failing, and its ClusterSPIFFEID is kept")
				return
			}
			id := getEntry(ctx, ns, name)(g).Spec.SpiffeID
			g.Expect(readyReasonOf(cur)).To(Equal("True"),
				"the binding is failing (%v) and its SpiffeEntry still issues %s", failures(cur), id)
			g.Expect(id).To(And(Equal(cur.Status.SPIFFEID), HaveSuffix("/renamed")), "Ready, and the SpiffeEntry is not what the spec renders")
		}).Should(Succeed())
	},
		Entry("refused as Invalid", "Invalid", SpecTimeout(2*time.Minute)),
		Entry("refused as Forbidden, as a webhook denies", "Forbidden", SpecTimeout(2*time.Minute)))

	// An admission check may pass a write's dry run and refuse the write
	// itself (a webhook that checks less on dry runs; here a policy that
	// reads request.dryRun). The binding must not write the SpiffeEntry,
	// be refused the ClusterSPIFFEID and withdraw the SpiffeEntry again on
	// every pass that the withdrawal's own event starts. Refused as
	// Forbidden, the review allows the write and the write sent again
	// after it is refused too; once that refusal has stood, the same holds
	// (with a dry run as the recheck, it passed, and the SpiffeEntry stayed
	// beside the refused ClusterSPIFFEID, retried for ever).
	DescribeTable("refused only when it is not a dry run, is not written again on every pass", func(ctx context.Context, reason string) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		out := output.Name(ns, "web")
		refuseClusterSPIFFEIDs(ctx, "refuse-real-"+strings.ToLower(reason)+"-"+out, []string{"CREATE", "UPDATE"}, reason,
			fmt.Sprintf("request.dryRun == true || object.metadata.name != '%s'", out))
		Eventually(func() metav1.StatusReason {
			err := k8s.Create(ctx, clusterSPIFFEIDNamed(out))
			if err == nil { // not refused yet: the probe must not stay in the way
				Expect(k8s.Delete(ctx, clusterSPIFFEIDNamed(out))).To(Succeed())
				Eventually(clusterSPIFFEIDExists(ctx, ns, "web")).Should(BeFalse())
			}
			return apierrors.ReasonForError(err)
		}).WithTimeout(time.Minute).Should(Equal(metav1.StatusReason(reason)), "the policy does not refuse yet")

		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Eventually(entryExists(ctx, ns, b.Name)).Should(BeFalse())
		Consistently(entryExists(ctx, ns, b.Name), 3*time.Second, 5*time.Millisecond).Should(BeFalse(),
			"a SpiffeEntry was written again for a binding whose ClusterSPIFFEID the API server refuses")
		Expect(findMessage(getBinding(ctx, ns, b.Name)(Default), v1alpha1.ConditionRenderFailure)).To(
			ContainSubstring("not written again until the binding's spec changes"))

		By("a change of the spec: judged again, still refused, and once the refusal is recorded again and the output withdrawn, no output written again")
		var generation int64
		Eventually(func(g Gomega) {
			cur := getBinding(ctx, ns, b.Name)(g)
			cur.Spec.Hint = "again"
			g.Expect(k8s.Update(ctx, cur)).To(Succeed())
			generation = cur.Generation
		}).Should(Succeed())
		Eventually(func(g Gomega) string {
			c := meta.FindStatusCondition(getBinding(ctx, ns, b.Name)(g).Status.Conditions, v1alpha1.ConditionRenderFailure)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.ObservedGeneration).To(Equal(generation))
			return c.Message
		}).WithTimeout(30 * time.Second).Should(ContainSubstring("not written again until the binding's spec changes"))
		Expect(readyReason(ctx, ns, b.Name)(Default)).To(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Eventually(entryExists(ctx, ns, b.Name)).Should(BeFalse())
		Consistently(entryExists(ctx, ns, b.Name), time.Second, 5*time.Millisecond).Should(BeFalse())
	},
		Entry("refused as Invalid", "Invalid", SpecTimeout(2*time.Minute)),
		Entry("refused as Forbidden, as a webhook denies", "Forbidden", SpecTimeout(2*time.Minute)))
})
