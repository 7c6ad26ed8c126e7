package controller_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// Second review of identity-operator's output and own-resources policies.
var _ = Describe("Adversarial: identity-operator policies, second review", func() {
	merge := func(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

	It("LEGIT: the controller's finalizer patch on an IdentityBinding without spec, and its stamp over an empty environment label", func(ctx context.Context) {
		asOperator := operatorClient()
		ns := newNamespace(ctx)
		var refused []string
		name := "atk2-nospec"
		nospec := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "IdentityBinding",
			"metadata": map[string]any{"namespace": ns, "name": name, "labels": map[string]any{labels.Environment: "elsewhere"}}}}
		if err := k8s.Create(ctx, nospec); err != nil {
			fmt.Fprintf(GinkgoWriter, "an IdentityBinding without spec is not accepted: %v\n", err)
		} else {
			DeferCleanup(func(ctx context.Context) {
				_ = k8s.Patch(ctx, nospec.DeepCopy(), merge(`{"metadata":{"finalizers":null}}`))
				_ = client.IgnoreNotFound(k8s.Delete(ctx, nospec.DeepCopy()))
			})
			if err := asOperator.Patch(ctx, nospec.DeepCopy(), merge(`{"metadata":{"finalizers":["`+labels.Finalizer+`"]}}`)); err != nil {
				refused = append(refused, "add the finalizer to an IdentityBinding without spec: "+err.Error())
			}
		}
		b := ownResourcesBinding(ns, "atk2-emptyenv")
		b.Labels = map[string]string{labels.Environment: ""}
		Expect(k8s.Create(ctx, b)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			_ = k8s.Patch(ctx, b.DeepCopy(), merge(`{"metadata":{"finalizers":null}}`))
			_ = client.IgnoreNotFound(k8s.Delete(ctx, b.DeepCopy()))
		})
		if err := asOperator.Patch(ctx, b.DeepCopy(),
			merge(`{"metadata":{"finalizers":["`+labels.Finalizer+`"],"labels":{"`+labels.Environment+`":"`+environment+`"}}}`)); err != nil {
			refused = append(refused, "stamp the default environment over an empty label (updateFinalizer): "+err.Error())
		}
		Expect(refused).To(BeEmpty(), "legitimate controller writes refused")
	})
})
