package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
)

// Attacks of a tenant who may create IdentityBindings and workloads in one
// namespace and label them with any environment.
var _ = Describe("Attacks on another binding's identity", func() {
	It("a binding's SPIFFE ID template cannot claim or knock out another namespace's identity", func(ctx context.Context) {
		attacker := newNamespace(ctx)
		victim := attacker + "-victim"
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: victim}})).To(Succeed())
		for _, ns := range []string{attacker, victim} {
			createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		}
		createBinding(ctx, victim, "web", "serving", "v1")
		Eventually(readyReason(ctx, victim, "web")).Should(Equal("True"))

		By("the attacker renders the victim's ID: a placeholder glued to text, a literal path, no namespace at all")
		createBinding(ctx, attacker, "glued", "serving", "v1", withTemplate("ns/{namespace}-victim/sa/{serviceAccount}/pool/{pool}/variant/{variant}"))
		createBinding(ctx, attacker, "literal", "serving", "v2", withTemplate("ns/"+victim+"/sa/serving/pool/web/variant/v1"))
		createBinding(ctx, attacker, "shared", "serving", "v3", withTemplate("shared/{serviceAccount}"))
		for _, name := range []string{"glued", "literal", "shared"} {
			Eventually(readyReason(ctx, attacker, name)).Should(Equal(v1alpha1.ReasonSPIFFEIDOutsideServiceAccount), name)
			Expect(failures(getBinding(ctx, attacker, name)(Default))).To(Equal([]string{"RenderFailure=" + v1alpha1.ReasonSPIFFEIDOutsideServiceAccount}))
			Expect(getBinding(ctx, attacker, name)(Default).Status.SPIFFEID).To(BeEmpty())
			Expect(entryExists(ctx, attacker, name)()).To(BeFalse())
		}

		By("the victim keeps its identity")
		Consistently(func(g Gomega) {
			g.Expect(readyReason(ctx, victim, "web")(g)).To(Equal("True"))
			g.Expect(conflictsOf(ctx, victim, "web")(g)).To(BeEmpty())
			g.Expect(entryExists(ctx, victim, "web")()).To(BeTrue())
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(time.Minute))

	It("a binding labelled with another environment still conflicts: environments never switch off conflict rules", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		createDeployment(ctx, ns, "web2", webSelector("web2"), map[string]string{"app": "web2"})
		inProd := func(b *v1alpha1.IdentityBinding) { b.Labels = map[string]string{labels.Environment: "prod"} }
		createBinding(ctx, ns, "a", "serving", "v1")
		Eventually(readyReason(ctx, ns, "a")).Should(Equal("True"))

		By("same namespace, service account and variant, other pool, other environment: VariantConflict on both sides")
		createBinding(ctx, ns, "b", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "web2"), inProd)
		Eventually(readyReason(ctx, ns, "a")).Should(Equal(v1alpha1.ReasonVariantConflict))
		Eventually(readyReason(ctx, ns, "b")).Should(Equal(v1alpha1.ReasonVariantConflict))
		Eventually(entryExists(ctx, ns, "a")).Should(BeFalse())
		Expect(entryExists(ctx, ns, "b")()).To(BeFalse())

		By("the same SPIFFE ID from another environment: DuplicateSPIFFEID on both sides")
		sharedID := withTemplate("ns/{namespace}/sa/{serviceAccount}/shared")
		createBinding(ctx, ns, "c", "other", "v1", sharedID)
		createBinding(ctx, ns, "d", "other", "v2", sharedID, inProd)
		Eventually(readyReason(ctx, ns, "c")).Should(Equal(v1alpha1.ReasonDuplicateSPIFFEID))
		Eventually(readyReason(ctx, ns, "d")).Should(Equal(v1alpha1.ReasonDuplicateSPIFFEID))
		Expect(entryExists(ctx, ns, "c")()).To(BeFalse())
		Expect(entryExists(ctx, ns, "d")()).To(BeFalse())
	}, SpecTimeout(time.Minute))

	It("an output of another environment for the same workloads holds a binding back (PeerOutputPending)", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		stale := &spiffev1alpha1.SpiffeEntry{
			ObjectMeta: metav1.ObjectMeta{Name: "prod-" + ns, Labels: map[string]string{
				labels.Environment: "prod", labels.OwnerUID: "a-binding-of-prod",
				index.LabelGroup: index.GroupKey(ns, "serving", "v1"),
			}},
			Spec: spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/ns/" + ns + "/sa/serving/old", ParentID: parentID, Selectors: []string{"k8s:ns:" + ns}},
		}
		Expect(k8s.Create(ctx, stale)).To(Succeed())
		createBinding(ctx, ns, "a", "serving", "v1")
		Eventually(readyReason(ctx, ns, "a")).Should(Equal(v1alpha1.ReasonPeerOutputPending))
		Consistently(entryExists(ctx, ns, "a"), time.Second, 100*time.Millisecond).Should(BeFalse())

		Expect(k8s.Delete(ctx, stale)).To(Succeed())
		Eventually(readyReason(ctx, ns, "a")).Should(Equal("True"))
	}, SpecTimeout(time.Minute))
})
