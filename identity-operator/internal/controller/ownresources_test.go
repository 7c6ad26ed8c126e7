package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

// ownResourcesBinding is an IdentityBinding of namespace ns for the policy
// on the operator's own resources.
func ownResourcesBinding(ns, name string) *v1alpha1.IdentityBinding {
	return &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{labels.Environment: environment}},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef:            v1alpha1.PoolReference{Name: "llm"},
			ServiceAccountName: "serving",
			IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: "v1"},
		},
	}
}

// installOwnResourcesPolicy creates the policy config/rbac puts beside the
// operator's ClusterRole on its own IdentityBindings, before the operator
// starts, so that every spec of the suite also proves it admits what the
// operator does; it returns once the API server enforces it.
func installOwnResourcesPolicy(ctx context.Context) {
	createManifests(ctx, filepath.Join(testsupport.ModuleRoot(), "config", "rbac"), "own_resources_policy.yaml", "own_resources_policy_binding.yaml")
	probe := ownResourcesBinding("default", "probe-own-resources-policy")
	Expect(k8s.Create(ctx, probe)).To(Succeed())
	Expect(testenv.UntilRefused(ctx, 30*time.Second, "changes no spec", func(n int) error {
		body := fmt.Sprintf(`{"spec":{"serviceAccountName":"other-%d"}}`, n)
		return operatorClient().Patch(ctx, probe.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(body)))
	})).To(Succeed())
	Expect(k8s.Delete(ctx, probe)).To(Succeed())
}

// identity-operator's ClusterRole patches every IdentityBinding (the
// finalizer, the environment label), which RBAC cannot narrow to metadata:
// its token could otherwise bind a tenant's binding to another pool or
// variant, and the operator would write the entries.
var _ = Describe("The own-resources policy: identity-operator's service account changes only the finalizer and environment label of IdentityBindings", func() {
	It("refuses a change of a binding's spec, labels, annotations, owners or other finalizers", func(ctx context.Context) {
		ns := newNamespace(ctx)
		b := ownResourcesBinding(ns, "web")
		Expect(k8s.Create(ctx, b)).To(Succeed())
		Eventually(func(g Gomega) []string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			return b.Finalizers
		}).Should(ContainElement(labels.Finalizer), "the operator's own finalizer is admitted")

		merge := func(body string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(body)) }
		Expect(testenv.Admitted(ctx, operatorClient(), b, map[string]client.Patch{
			"the pool":              merge(`{"spec":{"poolRef":{"name":"another"}}}`),
			"the variant":           merge(`{"spec":{"identityBoundary":{"variant":"v2"}}}`),
			"the service account":   merge(`{"spec":{"serviceAccountName":"admin"}}`),
			"a label":               merge(`{"metadata":{"labels":{"team":"x"}}}`),
			"the environment label": merge(`{"metadata":{"labels":{"` + labels.Environment + `":"other"}}}`),
			"an annotation":         merge(`{"metadata":{"annotations":{"x":"y"}}}`),
			"another finalizer":     merge(`{"metadata":{"finalizers":["` + labels.Finalizer + `","example.com/hold"]}}`),
			"an owner reference":    merge(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"x","uid":"3f1c0e7a-0000-4000-8000-00000000000d"}]}}`),
		}, "identity-operator changes no")).To(BeEmpty(), "want each refused")

		By("the binding is as its owner wrote it")
		got := &v1alpha1.IdentityBinding{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), got)).To(Succeed())
		Expect(got.Spec).To(Equal(b.Spec))
		Expect(got.Labels).To(Equal(map[string]string{labels.Environment: environment}))
		Expect(got.Annotations).To(BeEmpty())
		Expect(got.Finalizers).To(Equal([]string{labels.Finalizer}))
		Expect(k8s.Delete(ctx, got)).To(Succeed())
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(b), &v1alpha1.IdentityBinding{}) }).Should(Satisfy(apierrors.IsNotFound),
			"the operator removes its finalizer, which the policy admits")
	})
})
