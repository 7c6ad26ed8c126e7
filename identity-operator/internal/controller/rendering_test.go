package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

var _ = Describe("Rendering: a Ready binding gets outputs with the safe selector set", func() {
	It("renders a Deployment pool into a SpiffeEntry and a ClusterSPIFFEID", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		b := createBinding(ctx, ns, "web-canary", "serving", "canary")

		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		got := getBinding(ctx, ns, b.Name)(Default)
		wantSelectors := []string{
			"k8s:ns:" + ns,
			"k8s:pod-label:app:web",
			"k8s:pod-label:identity.trustplane.dev/variant:canary",
			"k8s:sa:serving",
		}
		wantID := "spiffe://example.org/ns/" + ns + "/sa/serving/pool/web/variant/canary"
		Expect(got.Status.SPIFFEID).To(Equal(wantID))
		Expect(got.Status.Selectors).To(Equal(wantSelectors))
		sum := sha256.Sum256([]byte(strings.Join(wantSelectors, "\n")))
		Expect(got.Status.SelectorFingerprint).To(Equal("sha256:" + hex.EncodeToString(sum[:])))
		Expect(failures(got)).To(BeEmpty())
		Expect(got.Status.Outputs).To(ConsistOf(
			v1alpha1.OutputReference{APIVersion: "spiffe.trustplane.dev/v1alpha1", Kind: "SpiffeEntry", Name: output.Name(ns, b.Name)},
			v1alpha1.OutputReference{APIVersion: "spire.spiffe.io/v1alpha1", Kind: "ClusterSPIFFEID", Name: output.Name(ns, b.Name)},
		))

		e := getEntry(ctx, ns, b.Name)(Default)
		Expect(e.Spec.SpiffeID).To(Equal(wantID))
		Expect(e.Spec.ParentID).To(Equal(parentID))
		Expect(e.Spec.Selectors).To(Equal(wantSelectors))
		Expect(e.Labels).To(HaveKeyWithValue(labels.OwnerUID, string(got.UID)))
		Expect(e.Labels).To(HaveKeyWithValue(labels.OwnerKind, "IdentityBinding"))
		Expect(e.Labels).To(HaveKeyWithValue(labels.OwnerName, b.Name))
		Expect(e.Labels).To(HaveKeyWithValue(labels.OwnerNamespace, ns))
		Expect(e.Labels).To(HaveKeyWithValue(labels.Environment, environment))
		Expect(e.OwnerReferences).To(BeEmpty(), "a namespaced binding cannot own a cluster-scoped object by reference")

		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		Expect(k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, u)).To(Succeed())
		Expect(u.Object["spec"]).To(HaveKeyWithValue("spiffeIDTemplate", wantID))
		Expect(u.Object["spec"]).To(HaveKeyWithValue("podSelector", map[string]any{"matchLabels": map[string]any{"app": "web", v1alpha1.BoundaryLabel: "canary"}}))
		for k, v := range map[string]any{"admin": false, "downstream": false, "fallback": false, "autoPopulateDNSNames": false, "federatesWith": []any{}, "dnsNameTemplates": []any{}} {
			Expect(u.Object["spec"]).To(HaveKeyWithValue(k, v))
		}
		Expect(u.Object["spec"]).To(HaveKeyWithValue("workloadSelectorTemplates", ConsistOf(
			"k8s:ns:"+ns, "k8s:pod-label:app:web", "k8s:pod-label:identity.trustplane.dev/variant:canary", "k8s:sa:serving")))
		Expect(u.GetLabels()).To(HaveKeyWithValue(labels.OwnerUID, string(got.UID)))

		By("a steady binding does not rewrite its outputs (no write loop)")
		rv, csidRV := e.ResourceVersion, u.GetResourceVersion()
		Consistently(func(g Gomega) []string {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, cur)).To(Succeed())
			return []string{getEntry(ctx, ns, b.Name)(g).ResourceVersion, cur.GetResourceVersion()}
		}, 2*time.Second, 200*time.Millisecond).Should(Equal([]string{rv, csidRV}))

		By("someone makes the ClusterSPIFFEID an admin, downstream identity with extra DNS names and federation: the operator repairs it")
		Expect(unstructured.SetNestedField(u.Object, true, "spec", "admin")).To(Succeed())
		Expect(unstructured.SetNestedField(u.Object, true, "spec", "downstream")).To(Succeed())
		Expect(unstructured.SetNestedField(u.Object, true, "spec", "autoPopulateDNSNames")).To(Succeed())
		Expect(unstructured.SetNestedStringSlice(u.Object, []string{"evil.example.org"}, "spec", "dnsNameTemplates")).To(Succeed())
		Expect(unstructured.SetNestedStringSlice(u.Object, []string{"spiffe://other.org"}, "spec", "federatesWith")).To(Succeed())
		Expect(k8s.Update(ctx, u)).To(Succeed())
		Eventually(func(g Gomega) map[string]any {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, cur)).To(Succeed())
			spec, _, _ := unstructured.NestedMap(cur.Object, "spec")
			return map[string]any{"admin": spec["admin"], "downstream": spec["downstream"], "autoPopulateDNSNames": spec["autoPopulateDNSNames"],
				"dnsNameTemplates": spec["dnsNameTemplates"], "federatesWith": spec["federatesWith"]}
		}).Should(Equal(map[string]any{"admin": false, "downstream": false, "autoPopulateDNSNames": false, "dnsNameTemplates": []any{}, "federatesWith": []any{}}))

		By("someone widens the SpiffeEntry: the boundary selector dropped, admin, downstream, DNS names, federation, another parent: the operator repairs it")
		entry := getEntry(ctx, ns, b.Name)(Default)
		wantEntry := entry.Spec.DeepCopy()
		entry.Spec.Selectors = []string{"k8s:ns:" + ns, "k8s:sa:serving"}
		entry.Spec.Admin, entry.Spec.Downstream = true, true
		entry.Spec.DNSNames = []string{"evil.example.org"}
		entry.Spec.FederatesWith = []spiffev1alpha1.TrustDomainName{"other.org"}
		entry.Spec.ParentID = "spiffe://example.org/some-node"
		Expect(k8s.Update(ctx, entry)).To(Succeed())
		Eventually(func(g Gomega) spiffev1alpha1.SpiffeEntrySpec { return getEntry(ctx, ns, b.Name)(g).Spec }).Should(Equal(*wantEntry))

		By("someone widens what the ClusterSPIFFEID selects: no boundary label, every namespace, fewer selectors, fallback, another ID: the operator repairs it")
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		Expect(k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, cur)).To(Succeed())
		want, _, _ := unstructured.NestedMap(cur.Object, "spec")
		Expect(unstructured.SetNestedField(cur.Object, map[string]any{"matchLabels": map[string]any{"app": "web"}}, "spec", "podSelector")).To(Succeed())
		Expect(unstructured.SetNestedField(cur.Object, map[string]any{}, "spec", "namespaceSelector")).To(Succeed())
		Expect(unstructured.SetNestedStringSlice(cur.Object, []string{"k8s:ns:" + ns}, "spec", "workloadSelectorTemplates")).To(Succeed())
		Expect(unstructured.SetNestedField(cur.Object, true, "spec", "fallback")).To(Succeed())
		Expect(unstructured.SetNestedField(cur.Object, "spiffe://example.org/ns/"+ns+"/sa/serving", "spec", "spiffeIDTemplate")).To(Succeed())
		Expect(k8s.Update(ctx, cur)).To(Succeed())
		Eventually(func(g Gomega) map[string]any {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, got)).To(Succeed())
			spec, _, _ := unstructured.NestedMap(got.Object, "spec")
			return spec
		}).Should(Equal(want))
	}, SpecTimeout(time.Minute))

	It("reads a StatefulSet's spec.selector as the pool selector", func(ctx context.Context) {
		ns := newNamespace(ctx)
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: appsv1.StatefulSetSpec{
				Selector: webSelector("db"),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "example.org/db:1"}}},
				},
			},
		}
		Expect(k8s.Create(ctx, sts)).To(Succeed())
		b := createBinding(ctx, ns, "db", "serving", "primary", withPool("", v1alpha1.StatefulSetKind, "db"))
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		Expect(getEntry(ctx, ns, b.Name)(Default).Spec.Selectors).To(Equal([]string{
			"k8s:ns:" + ns, "k8s:pod-label:app:db", "k8s:pod-label:identity.trustplane.dev/variant:primary", "k8s:sa:serving",
		}))
	}, SpecTimeout(time.Minute))

	It("reads an InferencePool's matchLabels and applies TTLs", func(ctx context.Context) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, inferencePool(ns, "llm", map[string]any{"app": "llm", "model": "small"}))).To(Succeed())
		b := createBinding(ctx, ns, "llm-stable", "serving", "stable", withPool("", "", "llm"), func(b *v1alpha1.IdentityBinding) {
			b.Spec.X509SVIDTTL = &metav1.Duration{Duration: time.Hour}
		})
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
		e := getEntry(ctx, ns, b.Name)(Default)
		Expect(e.Spec.Selectors).To(Equal([]string{
			"k8s:ns:" + ns, "k8s:pod-label:app:llm", "k8s:pod-label:identity.trustplane.dev/variant:stable",
			"k8s:pod-label:model:small", "k8s:sa:serving",
		}))
		Expect(e.Spec.X509SVIDTTL).To(Equal(&metav1.Duration{Duration: time.Hour}))
	}, SpecTimeout(time.Minute))
})
