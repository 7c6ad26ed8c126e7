package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// Attacks on the output policy by whoever holds identity-operator's service
// account token. Each spec asserts the safe behaviour: it fails when the
// attack gets through. (The parent ID, the TTLs and a ClusterSPIFFEID's
// className are the operator's flags, which the policy does not know: a
// documented limit.)
var _ = Describe("Adversarial: the output policy against the operator's stolen token", func() {
	var asOperator client.Client
	sel := []string{"k8s:ns:default", "k8s:sa:web", "k8s:pod-label:" + v1alpha1.BoundaryLabel + ":stable"}
	seq := 0
	name := func() string { seq++; return fmt.Sprintf("outputpolicy-adv-%d-%d", time.Now().UnixNano()%100000, seq) }
	// entry is shaped as an output, but carries only the owner-kind label
	// (no owner UID), so the orphan sweeper leaves it alone.
	entry := func(selectors []string) *spiffev1alpha1.SpiffeEntry {
		return &spiffev1alpha1.SpiffeEntry{
			ObjectMeta: metav1.ObjectMeta{Name: name(), Labels: map[string]string{labels.OwnerKind: "IdentityBinding"}},
			Spec: spiffev1alpha1.SpiffeEntrySpec{
				SpiffeID: "spiffe://" + trustDomain + "/ns/default/sa/web/stable", ParentID: parentID,
				Selectors: append([]string(nil), selectors...),
			},
		}
	}
	csid := func(mutate func(map[string]any)) *unstructured.Unstructured {
		return outputClusterSPIFFEID(name(), sel, mutate)
	}
	// refuse asserts that a write was refused; if it went through, the
	// object is deleted (as admin) so the suite stays clean.
	refuse := func(ctx context.Context, obj client.Object, err error, what string) {
		if err == nil {
			_ = k8s.Delete(ctx, obj)
		}
		Expect(err).To(HaveOccurred(), "ATTACK ADMITTED: %s", what)
	}
	adminEntry := func(ctx context.Context) *spiffev1alpha1.SpiffeEntry {
		e := entry([]string{"unix:uid:0"})
		e.Labels = nil
		e.Spec.Admin = true
		Expect(k8s.Create(ctx, e)).To(Succeed())
		return e
	}

	BeforeEach(func() { asOperator = operatorClient() })

	It("refuses an entry naming another namespace's SPIFFE ID for labelled pods it selects", func(ctx context.Context) {
		e := entry(sel)
		e.Spec.SpiffeID = "spiffe://" + trustDomain + "/ns/kube-system/sa/cluster-admin/x"
		refuse(ctx, e, asOperator.Create(ctx, e), "SpiffeEntry default/web pods -> spiffeID of ns kube-system")
	})

	It("refuses an entry whose SPIFFE ID is outside ns/<ns>/sa/<sa>/ (a spire/ path)", func(ctx context.Context) {
		e := entry(sel)
		e.Spec.SpiffeID = "spiffe://" + trustDomain + "/spire/server"
		refuse(ctx, e, asOperator.Create(ctx, e), "spiffeID spire/server")
	})

	It("refuses an entry sent to another spiffe-operator instance by className (the operator never sets it)", func(ctx context.Context) {
		e := entry(sel)
		e.Spec.ClassName = "prod-spire"
		refuse(ctx, e, asOperator.Create(ctx, e), "SpiffeEntry className prod-spire")
	})

	It("refuses a ClusterSPIFFEID whose SPIFFE ID the pod picks (template from a pod annotation)", func(ctx context.Context) {
		u := csid(func(s map[string]any) {
			s["spiffeIDTemplate"] = `spiffe://{{ .TrustDomain }}/{{ index .PodMeta.Annotations "id" }}`
		})
		refuse(ctx, u, asOperator.Create(ctx, u), "ClusterSPIFFEID spiffeIDTemplate from pod annotation")
	})

	It("refuses turning another binding's output onto its own pods (selectors changed, SPIFFE ID kept)", func(ctx context.Context) {
		victim := entry([]string{"k8s:ns:payments", "k8s:sa:api", "k8s:pod-label:" + v1alpha1.BoundaryLabel + ":stable"})
		victim.Spec.SpiffeID = "spiffe://" + trustDomain + "/ns/payments/sa/api/stable"
		Expect(k8s.Create(ctx, victim)).To(Succeed(), "the operator's output for payments/api (written as admin here)")
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, victim) })
		Expect(asOperator.Get(ctx, client.ObjectKeyFromObject(victim), victim)).To(Succeed())
		victim.Spec.Selectors = sel
		Expect(asOperator.Update(ctx, victim)).To(HaveOccurred(), "ATTACK ADMITTED: payments' SPIFFE ID now issued to default/web pods")
	})

	It("cannot write status of any entry or ClusterSPIFFEID (subresource unmatched by the policy, but not granted)", func(ctx context.Context) {
		foreign := adminEntry(ctx)
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, foreign) })
		Expect(asOperator.Get(ctx, client.ObjectKeyFromObject(foreign), foreign)).To(Succeed())
		foreign.Status.ParentIDs = []string{"spiffe://" + trustDomain + "/spire/agent/x"}
		foreign.Status.EntryID = "hijack"
		err := asOperator.Status().Update(ctx, foreign)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "status update: %v", err)
		err = asOperator.Status().Patch(ctx, foreign, client.RawPatch(types.MergePatchType, []byte(`{"status":{"entryID":"x"}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "status patch: %v", err)

		u := csid(func(map[string]any) {})
		Expect(k8s.Create(ctx, u)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, u) })
		err = asOperator.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(`{"status":{"stats":{"namespacesSelected":1}}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "ClusterSPIFFEID status patch: %v", err)
	})

	It("cannot deletecollection entries or ClusterSPIFFEIDs", func(ctx context.Context) {
		foreign := adminEntry(ctx)
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, foreign) })
		err := asOperator.DeleteAllOf(ctx, &spiffev1alpha1.SpiffeEntry{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deletecollection: %v", err)
		l := &unstructured.Unstructured{}
		l.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		err = asOperator.DeleteAllOf(ctx, l)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deletecollection ClusterSPIFFEIDs: %v", err)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), &spiffev1alpha1.SpiffeEntry{})).To(Succeed())
	})

	It("JSON patch, merge patch with null and server-side apply are judged on the result", func(ctx context.Context) {
		own := entry(sel)
		Expect(asOperator.Create(ctx, own)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, own) })
		foreign := adminEntry(ctx)
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, foreign) })

		for what, p := range map[string]client.Patch{
			"json patch admin":            client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/admin","value":true}]`)),
			"json patch selectors":        client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/selectors","value":["k8s:ns:default"]}]`)),
			"json patch remove label":     client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/labels/trustplane.dev~1owner-kind"}]`)),
			"merge null labels":           client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null}}`)),
			"merge null owner-kind label": client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"trustplane.dev/owner-kind":null}}}`)),
			"merge downstream":            client.RawPatch(types.MergePatchType, []byte(`{"spec":{"downstream":true}}`)),
			"merge selectors":             client.RawPatch(types.MergePatchType, []byte(`{"spec":{"selectors":["k8s:ns:default","k8s:sa:web","k8s:pod-label:identity.trustplane.dev/variant:stable","unix:uid:0"]}}`)),
		} {
			err := asOperator.Patch(ctx, own.DeepCopy(), p)
			GinkgoWriter.Printf("own %s: %v\n", what, err)
			Expect(err).To(HaveOccurred(), "ATTACK ADMITTED on own output: %s", what)
		}
		for what, p := range map[string]client.Patch{
			"merge add owner label": client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"trustplane.dev/owner-kind":"IdentityBinding"}}}`)),
			"json add finalizer":    client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers","value":["x.example/block"]}]`)),
			"merge spec selectors":  client.RawPatch(types.MergePatchType, []byte(`{"spec":{"selectors":["k8s:ns:default","k8s:sa:web","k8s:pod-label:identity.trustplane.dev/variant:stable"]}}`)),
		} {
			err := asOperator.Patch(ctx, foreign.DeepCopy(), p)
			GinkgoWriter.Printf("foreign %s: %v\n", what, err)
			Expect(err).To(HaveOccurred(), "ATTACK ADMITTED on admin's entry: %s", what)
		}

		By("server-side apply")
		apply := func(n string, body string) error {
			e := &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: n}}
			return asOperator.Patch(ctx, e, client.RawPatch(types.ApplyYAMLPatchType, []byte(body)), client.FieldOwner("opatk"), client.ForceOwnership)
		}
		Expect(apply(foreign.Name, `{"apiVersion":"spiffe.trustplane.dev/v1alpha1","kind":"SpiffeEntry","metadata":{"name":"`+foreign.Name+
			`","labels":{"trustplane.dev/owner-kind":"IdentityBinding"}}}`)).To(HaveOccurred(), "SSA label onto admin's entry")
		n := name()
		err := apply(n, `{"apiVersion":"spiffe.trustplane.dev/v1alpha1","kind":"SpiffeEntry","metadata":{"name":"`+n+
			`","labels":{"trustplane.dev/owner-kind":"IdentityBinding"}},"spec":{"spiffeID":"spiffe://example.org/ns/default/sa/web/x","parentID":"`+parentID+
			`","admin":true,"selectors":["k8s:ns:default","k8s:sa:web","k8s:pod-label:identity.trustplane.dev/variant:stable"]}}`)
		refuse(ctx, &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: n}}, err, "SSA create admin entry")
		Expect(apply(own.Name, `{"apiVersion":"spiffe.trustplane.dev/v1alpha1","kind":"SpiffeEntry","metadata":{"name":"`+own.Name+
			`"},"spec":{"downstream":true}}`)).To(HaveOccurred(), "SSA downstream onto own output")

		kept := &spiffev1alpha1.SpiffeEntry{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), kept)).To(Succeed())
		Expect(kept.Labels).To(BeEmpty())
		Expect(kept.Finalizers).To(BeEmpty())
	})

	It("selector spelling tricks do not pass as the three required kinds nor add another kind", func(ctx context.Context) {
		b := "k8s:pod-label:" + v1alpha1.BoundaryLabel
		for what, set := range map[string][]string{
			"upper-case type extra":          append([]string{"K8S:ns:kube-system"}, sel...),
			"upper-case key extra":           append([]string{"k8s:NS:kube-system"}, sel...),
			"leading space":                  {" k8s:ns:default", "k8s:sa:web", b + ":stable"},
			"variant without value":          {"k8s:ns:default", "k8s:sa:web", b},
			"variant key prefix only":        {"k8s:ns:default", "k8s:sa:web", b + "x:stable"},
			"boundary as another label kind": {"k8s:ns:default", "k8s:sa:web", "k8s:pod-label:app:web"},
			"fullwidth k8s":                  {"ｋ8s:ns:default", "k8s:ns:default", "k8s:sa:web", b + ":stable"},
			"container image":                append([]string{"k8s:container-image:x"}, sel...),
			"pod owner":                      append([]string{"k8s:pod-owner:ReplicaSet:x"}, sel...),
			"docker":                         append([]string{"docker:label:a:b"}, sel...),
			"ns selector in pod-label form":  {"k8s:pod-label:ns:default", "k8s:sa:web", b + ":stable"},
		} {
			e := entry(set)
			refuse(ctx, e, asOperator.Create(ctx, e), what)
		}
	})

	It("cannot alter, finalize or delete a ClusterSPIFFEID it did not make", func(ctx context.Context) {
		u := csid(func(s map[string]any) { s["admin"] = true; s["namespaceSelector"] = map[string]any{} })
		u.SetLabels(nil)
		Expect(k8s.Create(ctx, u)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, u) })
		Expect(asOperator.Delete(ctx, u.DeepCopy())).To(HaveOccurred(), "delete admin's ClusterSPIFFEID")
		Expect(asOperator.Patch(ctx, u.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["x.example/block"]}}`)))).To(HaveOccurred(), "finalizer on admin's ClusterSPIFFEID")
		Expect(asOperator.Patch(ctx, u.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"trustplane.dev/owner-kind":"IdentityBinding"}},"spec":{"admin":false}}`)))).To(HaveOccurred(), "adopt admin's ClusterSPIFFEID")
	})

	It("ClusterSPIFFEID selector shapes that widen the pods selected are refused", func(ctx context.Context) {
		for what, mutate := range map[string]func(map[string]any){
			"boundary only in matchExpressions": func(s map[string]any) {
				s["podSelector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": v1alpha1.BoundaryLabel, "operator": "Exists"}}}
			},
			"namespace by another label": func(s map[string]any) {
				s["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"team": "a"}}
			},
			"namespace by matchExpressions In": func(s map[string]any) {
				s["namespaceSelector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/metadata.name", "operator": "In", "values": []any{"a", "b"}}}}
			},
			"downstream":           func(s map[string]any) { s["downstream"] = true },
			"autoPopulateDNSNames": func(s map[string]any) { s["autoPopulateDNSNames"] = true },
			"federatesWith":        func(s map[string]any) { s["federatesWith"] = []any{"partner.test"} },
			"node-name template":   func(s map[string]any) { s["workloadSelectorTemplates"] = []any{"k8s:node-name:{{ .NodeMeta.Name }}"} },
		} {
			u := csid(mutate)
			refuse(ctx, u, asOperator.Create(ctx, u), what)
		}
	})

	It("cannot remove or rewrite the policy that holds it", func(ctx context.Context) {
		vap := &unstructured.Unstructured{}
		vap.SetAPIVersion("admissionregistration.k8s.io/v1")
		vap.SetKind("ValidatingAdmissionPolicy")
		vap.SetName("identity-operator-outputs.trustplane.dev")
		Expect(apierrors.IsForbidden(asOperator.Delete(ctx, vap))).To(BeTrue())
		vb := vap.DeepCopy()
		vb.SetKind("ValidatingAdmissionPolicyBinding")
		Expect(apierrors.IsForbidden(asOperator.Delete(ctx, vb))).To(BeTrue())
	})
})
