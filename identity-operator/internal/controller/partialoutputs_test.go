package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// refuseClusterSPIFFEID makes the API server refuse, as Invalid, every
// write of the ClusterSPIFFEID named name (a ValidatingAdmissionPolicy and
// its binding, removed when the spec ends), and waits until it does.
func refuseClusterSPIFFEID(ctx context.Context, name string) {
	policy := fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: refuse-%[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [spire.spiffe.io]
      apiVersions: ["*"]
      operations: [CREATE, UPDATE]
      resources: [clusterspiffeids]
  validations:
  - expression: "object.metadata.name != '%[1]s'"
    reason: Invalid
    message: refused by the spec
`, name)
	binding := fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: refuse-%[1]s}
spec:
  policyName: refuse-%[1]s
  validationActions: [Deny]
`, name)
	for _, doc := range []string{policy, binding} {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		Expect(k8s.Create(ctx, u)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, u))).To(Succeed()) })
	}
	probe := output.New(output.KindClusterSPIFFEID).(*unstructured.Unstructured)
	probe.SetName(name)
	Expect(unstructured.SetNestedField(probe.Object, "spiffe://example.org/probe", "spec", "spiffeIDTemplate")).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsInvalid(k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll))
	}).WithTimeout(time.Minute).Should(BeTrue(), "the policy does not refuse yet")
}

var _ = Describe("A pass that fails after writing some of its outputs", func() {
	// The outputs are written one kind after another (SpiffeEntry, then
	// ClusterSPIFFEID here). When the API server refuses the second, the
	// binding fails, and a failing binding keeps no output: the first,
	// written by the same pass, goes too.
	It("keeps none of them", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		refuseClusterSPIFFEID(ctx, output.Name(ns, "web"))

		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Expect(findMessage(getBinding(ctx, ns, b.Name)(Default), v1alpha1.ConditionRenderFailure)).To(
			And(ContainSubstring("refused by the spec"), ContainSubstring("no output is kept")))
		Expect(entryExists(ctx, ns, b.Name)()).To(BeFalse(), "the SpiffeEntry the failing pass wrote is still there")
		Expect(clusterSPIFFEIDExists(ctx, ns, b.Name)()).To(BeFalse())
		Consistently(entryExists(ctx, ns, b.Name), 2*time.Second, 100*time.Millisecond).Should(BeFalse())
	}, SpecTimeout(2*time.Minute))
})
