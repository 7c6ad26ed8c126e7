package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// installOutputPolicy creates the policy config/rbac puts beside the
// operator's ClusterRole, before the operator starts, so that every spec of
// the suite also proves it admits what the operator writes; it returns once
// the API server enforces it.
func installOutputPolicy(ctx context.Context) {
	// The suite's operator runs with the settings config/manager ships.
	createManifests(ctx, filepath.Join(testsupport.ModuleRoot(), "config", "manager"), "settings.yaml")
	createManifests(ctx, filepath.Join(testsupport.ModuleRoot(), "config", "rbac"), "output_policy.yaml", "output_policy_binding.yaml")
	asOperator := operatorClient()
	Eventually(func() error {
		probe := outputEntry("probe-output-policy", []string{"unix:uid:0"})
		err := asOperator.Create(ctx, probe)
		if err == nil {
			Expect(k8s.Delete(ctx, probe)).To(Succeed())
		}
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(MatchError(ContainSubstring("select pods by namespace")))
}

// settingsConfigMap holds the operator's settings, which the output policy
// reads as its parameters (config/manager/settings.yaml).
const settingsConfigMap = "identity-operator-settings"

// outputSelectors is a set the operator renders for a binding default/web
// of variant stable: namespace, service account, a pool label and the
// boundary.
var outputSelectors = []string{"k8s:ns:default", "k8s:pod-label:app:web", "k8s:pod-label:" + v1alpha1.BoundaryLabel + ":stable", "k8s:sa:web"}

// operatorClient is a client of the operator's identity: its service
// account, holding config/rbac/role.yaml only.
func operatorClient() client.Client {
	GinkgoHelper()
	c, err := client.New(operatorConfig, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// outputEntry is a SpiffeEntry shaped as the operator's output of a
// binding default/web, with the given selectors.
func outputEntry(name string, selectors []string) *spiffev1alpha1.SpiffeEntry {
	return &spiffev1alpha1.SpiffeEntry{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			labels.OwnerKind: "IdentityBinding", labels.OwnerUID: "3f1c0e7a-0000-4000-8000-000000000001",
			labels.OwnerName: "web", labels.OwnerNamespace: "default",
		}},
		Spec: spiffev1alpha1.SpiffeEntrySpec{
			SpiffeID:  "spiffe://" + trustDomain + "/ns/default/sa/web/stable",
			ParentID:  parentID,
			Selectors: selectors,
		},
	}
}

// outputClusterSPIFFEID is a ClusterSPIFFEID shaped as the operator's
// output of a binding default/web of variant stable, with the given
// selectors, its spec then changed by mutate.
func outputClusterSPIFFEID(name string, selectors []string, mutate func(spec map[string]any)) *unstructured.Unstructured {
	d := output.Desired{Namespace: "default", ServiceAccount: "web", Variant: "stable", SPIFFEID: "spiffe://" + trustDomain + "/ns/default/sa/web/stable",
		ParentID: parentID, Selectors: selectors, PoolLabels: map[string]string{"app": "web"}}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
	u.SetName(name)
	u.SetLabels(map[string]string{labels.OwnerKind: "IdentityBinding"})
	spec := d.ClusterSPIFFEIDSpec()
	mutate(spec)
	u.Object["spec"] = spec
	return u
}

// Whoever holds identity-operator's service account token holds its
// ClusterRole, which may create, change and delete every SpiffeEntry and
// ClusterSPIFFEID: RBAC names no narrower set. The policy in config/rbac
// holds that account to what the operator writes.
var _ = Describe("The output policy: identity-operator's service account writes only what the operator writes", Ordered, func() {
	var asOperator client.Client
	selectors := outputSelectors
	seq := 0
	name := func() string { seq++; return fmt.Sprintf("output-policy-%d", seq) }

	BeforeAll(func() { asOperator = operatorClient() })

	It("admits an output shaped as the operator's, and its change and deletion", func(ctx context.Context) {
		e := outputEntry(name(), selectors)
		Expect(asOperator.Create(ctx, e)).To(Succeed())
		e.Spec.Selectors = append([]string{"k8s:pod-label:tier:front"}, selectors...)
		Expect(asOperator.Update(ctx, e)).To(Succeed())
		Expect(asOperator.Delete(ctx, e)).To(Succeed())
	})

	It("refuses an admin, downstream, federating or DNS-named entry", func(ctx context.Context) {
		for what, mutate := range map[string]func(*spiffev1alpha1.SpiffeEntry){
			"admin":      func(e *spiffev1alpha1.SpiffeEntry) { e.Spec.Admin = true },
			"downstream": func(e *spiffev1alpha1.SpiffeEntry) { e.Spec.Downstream = true },
			"federatesWith": func(e *spiffev1alpha1.SpiffeEntry) {
				e.Spec.FederatesWith = []spiffev1alpha1.TrustDomainName{"partner.test"}
			},
			"dnsNames": func(e *spiffev1alpha1.SpiffeEntry) { e.Spec.DNSNames = []string{"web.default.svc"} },
		} {
			e := outputEntry(name(), selectors)
			mutate(e)
			Expect(asOperator.Create(ctx, e)).To(MatchError(ContainSubstring("no admin, downstream")), what)

			By("nor turns an output into one: " + what)
			e = outputEntry(name(), selectors)
			Expect(asOperator.Create(ctx, e)).To(Succeed())
			mutate(e)
			Expect(asOperator.Update(ctx, e)).To(MatchError(ContainSubstring("no admin, downstream")), what)
		}
	})

	It("refuses selectors that could match a pod without the boundary label, or outside one namespace and service account", func(ctx context.Context) {
		for what, set := range map[string][]string{
			"a unix selector":            append([]string{"unix:uid:0"}, selectors...),
			"a node selector":            append([]string{"k8s:node-name:node-1"}, selectors...),
			"no boundary selector":       {"k8s:ns:default", "k8s:sa:web", "k8s:pod-label:app:web"},
			"two boundary selectors":     append([]string{"k8s:pod-label:" + v1alpha1.BoundaryLabel + ":canary"}, selectors...),
			"no namespace selector":      {"k8s:sa:web", "k8s:pod-label:" + v1alpha1.BoundaryLabel + ":stable"},
			"two namespace selectors":    append([]string{"k8s:ns:kube-system"}, selectors...),
			"no service account":         {"k8s:ns:default", "k8s:pod-label:" + v1alpha1.BoundaryLabel + ":stable"},
			"a pod UID instead of label": {"k8s:ns:default", "k8s:sa:web", "k8s:pod-uid:3f1c0e7a-0000-4000-8000-000000000002"},
		} {
			Expect(asOperator.Create(ctx, outputEntry(name(), set))).To(MatchError(ContainSubstring("select pods by namespace")), what)
		}
	})

	It("refuses to create, change or delete an entry that is not an output, or to make one out of an output", func(ctx context.Context) {
		foreign := outputEntry(name(), []string{"unix:uid:0"})
		foreign.Labels = nil
		foreign.Spec.Admin = true
		Expect(k8s.Create(ctx, foreign)).To(Succeed(), "the admin makes an entry of its own")

		unlabelled := outputEntry(name(), selectors)
		unlabelled.Labels = nil
		Expect(asOperator.Create(ctx, unlabelled)).To(MatchError(ContainSubstring("only its own outputs")))

		Expect(asOperator.Get(ctx, client.ObjectKeyFromObject(foreign), foreign)).To(Succeed())
		Expect(asOperator.Delete(ctx, foreign)).To(MatchError(ContainSubstring("only its own outputs")))
		foreign.Labels = map[string]string{labels.OwnerKind: "IdentityBinding"}
		Expect(asOperator.Update(ctx, foreign)).To(MatchError(ContainSubstring("only its own outputs")))

		By("the admin's entry is still there, unchanged")
		kept := &spiffev1alpha1.SpiffeEntry{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), kept)).To(Succeed())
		Expect(kept.Labels).To(BeEmpty())
		Expect(kept.Spec.Admin).To(BeTrue())

		By("nor may it take the owner label off an output")
		e := outputEntry(name(), selectors)
		Expect(asOperator.Create(ctx, e)).To(Succeed())
		delete(e.Labels, labels.OwnerKind)
		Expect(asOperator.Update(ctx, e)).To(MatchError(ContainSubstring("only its own outputs")))
	})

	It("refuses a trust domain, parent ID, SVID TTL or ClusterSPIFFEID class other than the operator's settings", func(ctx context.Context) {
		long, longer := metav1.Duration{Duration: 48 * time.Hour}, metav1.Duration{Duration: 25 * time.Hour}
		atMost := metav1.Duration{Duration: 24 * time.Hour}
		for what, mutate := range map[string]func(*spiffev1alpha1.SpiffeEntry){
			"another trust domain's SPIFFE ID (and parent)": func(e *spiffev1alpha1.SpiffeEntry) {
				e.Spec.SpiffeID = "spiffe://other.test/ns/default/sa/web/stable"
				e.Spec.ParentID = "spiffe://other.test/k8s-cluster-nodes"
			},
			"another parent (one agent's own ID)": func(e *spiffev1alpha1.SpiffeEntry) {
				e.Spec.ParentID = "spiffe://" + trustDomain + "/spire/agent/x509pop/attacker"
			},
			"an X509-SVID TTL over the maximum": func(e *spiffev1alpha1.SpiffeEntry) { e.Spec.X509SVIDTTL = &long },
			"a JWT-SVID TTL over the maximum":   func(e *spiffev1alpha1.SpiffeEntry) { e.Spec.JWTSVIDTTL = &longer },
		} {
			e := outputEntry(name(), selectors)
			mutate(e)
			Expect(asOperator.Create(ctx, e)).To(MatchError(ContainSubstring(settingsConfigMap)), what)

			By("nor turns an output into one: " + what)
			e = outputEntry(name(), selectors)
			Expect(asOperator.Create(ctx, e)).To(Succeed())
			mutate(e)
			Expect(asOperator.Update(ctx, e)).To(MatchError(ContainSubstring(settingsConfigMap)), what)
		}
		e := outputEntry(name(), selectors)
		e.Spec.X509SVIDTTL, e.Spec.JWTSVIDTTL = &atMost, &atMost
		Expect(asOperator.Create(ctx, e)).To(Succeed(), "TTLs of the maximum itself")

		for what, mutate := range map[string]func(map[string]any){
			"another class":                     func(s map[string]any) { s["className"] = "production" },
			"an X509-SVID TTL over the maximum": func(s map[string]any) { s["ttl"] = "48h" },
			"a JWT-SVID TTL over the maximum":   func(s map[string]any) { s["jwtTtl"] = "25h0m0s" },
			"another trust domain's SPIFFE ID": func(s map[string]any) {
				s["spiffeIDTemplate"] = "spiffe://other.test/ns/default/sa/web/stable"
			},
		} {
			Expect(asOperator.Create(ctx, outputClusterSPIFFEID(name(), selectors, mutate))).To(MatchError(ContainSubstring(settingsConfigMap)), what)
		}
		Expect(asOperator.Create(ctx, outputClusterSPIFFEID(name(), selectors, func(s map[string]any) { s["ttl"], s["jwtTtl"] = "24h", "1h" }))).
			To(Succeed(), "TTLs within the maximum")
	})

	It("refuses a ClusterSPIFFEID that selects pods without the boundary label or beyond one named namespace", func(ctx context.Context) {
		build := func(mutate func(spec map[string]any)) *unstructured.Unstructured {
			return outputClusterSPIFFEID(name(), selectors, mutate)
		}
		Expect(asOperator.Create(ctx, build(func(map[string]any) {}))).To(Succeed(), "the operator's own shape")
		for what, mutate := range map[string]func(map[string]any){
			"no boundary label in the pod selector": func(s map[string]any) { s["podSelector"] = map[string]any{"matchLabels": map[string]any{"app": "web"}} },
			"every namespace":                       func(s map[string]any) { s["namespaceSelector"] = map[string]any{} },
			"admin":                                 func(s map[string]any) { s["admin"] = true },
			"DNS names":                             func(s map[string]any) { s["dnsNameTemplates"] = []any{"web.default.svc"} },
			"a unix selector template":              func(s map[string]any) { s["workloadSelectorTemplates"] = []any{"unix:uid:0"} },
		} {
			err := asOperator.Create(ctx, build(mutate))
			Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%s: want a refusal, got %v", what, err)
			Expect(err).To(MatchError(ContainSubstring("identity-operator")), what)
		}
	})
})

// Without its parameters the policy cannot say what the operator's settings
// are, so it refuses everything rather than admit anything.
var _ = Describe("The output policy while the operator's settings ConfigMap is missing or forged", Serial, func() {
	write := func(ctx context.Context) error {
		e := outputEntry(fmt.Sprintf("no-settings-%d", time.Now().UnixNano()), outputSelectors)
		err := operatorClient().Create(ctx, e)
		if err == nil {
			Expect(k8s.Delete(ctx, e)).To(Succeed())
		}
		return err
	}
	// takeSettings deletes the settings ConfigMap, and puts it back after
	// the spec, once the operator's account may write again.
	takeSettings := func(ctx context.Context) *corev1.ConfigMap {
		settings := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: settingsConfigMap}, settings)).To(Succeed())
		Expect(k8s.Delete(ctx, settings)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: settings.Namespace, Name: settings.Name}}))).To(Succeed())
			Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: settings.Namespace, Name: settings.Name},
				Data: settings.Data})).To(Succeed())
			Eventually(write).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		})
		return settings
	}

	It("refuses every write of the operator's account while it is missing", func(ctx context.Context) {
		takeSettings(ctx)
		Eventually(write).WithContext(ctx).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("no params found")))
	})

	// bundle-operator's token may create a ConfigMap labelled as a
	// TrustBundle's target in any namespace: one such is no settings.
	It("refuses every write while the settings carry a TrustBundle target's label", func(ctx context.Context) {
		settings := takeSettings(ctx)
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: settings.Namespace, Name: settings.Name,
			Labels: map[string]string{"bundle.trustplane.dev/trustbundle": "planted", labels.OwnerUID: "3f1c0e7a-0000-4000-8000-00000000000b"}},
			Data: settings.Data})).To(Succeed())
		Eventually(write).WithContext(ctx).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("TRUST_DOMAIN of ConfigMap " + settingsConfigMap)))
	})
})
