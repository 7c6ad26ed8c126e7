package operator_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// Second review of spiffe-operator's own-resources policy. Attempts are
// logged as "ATTACK2 <name>: refused|ADMITTED".
var _ = Describe("Adversarial: spiffe-operator own-resources policy, second review", func() {
	merge := func(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }
	jsonPatch := func(s string) client.Patch { return client.RawPatch(types.JSONPatchType, []byte(s)) }

	It("request shapes on a SpiffeEntry's spec: JSON patch, apply with force, full update, the status subresource", func(sctx context.Context) {
		asOperator := operatorClient()
		e := spiffeEntry("atk2-shapes", func(s *v1alpha1.SpiffeEntrySpec) { s.Selectors = []string{"unix:uid:4242"} })
		e.Labels = map[string]string{labels.Environment: "elsewhere"}
		Expect(k8s.Create(sctx, e)).To(Succeed())
		DeferCleanup(func(c context.Context) {
			_ = k8s.Patch(c, e.DeepCopy(), merge(`{"metadata":{"finalizers":null}}`))
			Expect(client.IgnoreNotFound(k8s.Delete(c, e.DeepCopy()))).To(Succeed())
		})
		fresh := func() *v1alpha1.SpiffeEntry {
			o := &v1alpha1.SpiffeEntry{}
			Expect(k8s.Get(sctx, client.ObjectKeyFromObject(e), o)).To(Succeed())
			return o
		}
		before := fresh().Spec
		var admitted []string
		try := func(what string, err error) {
			if err == nil {
				admitted = append(admitted, what)
			}
			fmt.Fprintf(GinkgoWriter, "ATTACK2 %s: %v\n", what, err)
		}
		try("JSON patch add /spec/admin", asOperator.Patch(sctx, fresh(), jsonPatch(`[{"op":"add","path":"/spec/admin","value":true}]`)))
		try("JSON patch replace /spec/selectors", asOperator.Patch(sctx, fresh(), jsonPatch(`[{"op":"replace","path":"/spec/selectors","value":["unix:uid:0"]}]`)))
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "SpiffeEntry",
			"metadata": map[string]any{"name": e.Name}, "spec": map[string]any{"admin": true}}}
		try("server-side apply with force of spec.admin", asOperator.Apply(sctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("attacker"), client.ForceOwnership))
		full := fresh()
		full.Spec.Downstream = true
		try("update with a full object", asOperator.Update(sctx, full))
		st := fresh()
		_ = asOperator.Status().Patch(sctx, st, merge(`{"spec":{"admin":true,"downstream":true}}`))
		Expect(fresh().Spec).To(Equal(before), "the spec changed")
		Expect(admitted).To(BeEmpty())
	})

	It("LEGIT: the controller's stamp of its environment over an empty environment label", func(sctx context.Context) {
		asOperator := operatorClient()
		e := spiffeEntry("atk2-emptyenv", func(s *v1alpha1.SpiffeEntrySpec) { s.Selectors = []string{"unix:uid:4243"} })
		e.Labels = map[string]string{labels.Environment: ""}
		Expect(k8s.Create(sctx, e)).To(Succeed())
		DeferCleanup(func(c context.Context) {
			_ = k8s.Patch(c, e.DeepCopy(), merge(`{"metadata":{"finalizers":null}}`))
			Expect(client.IgnoreNotFound(k8s.Delete(c, e.DeepCopy()))).To(Succeed())
		})
		err := asOperator.Patch(sctx, e.DeepCopy(),
			merge(`{"metadata":{"finalizers":["`+labels.Finalizer+`"],"labels":{"`+labels.Environment+`":"default"}}}`))
		Expect(err).NotTo(HaveOccurred(), "updateFinalizer stamps the default environment where the label is empty (stampsEnvironment)")
	})
})
