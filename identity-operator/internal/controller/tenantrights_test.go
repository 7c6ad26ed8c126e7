package controller_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// A tenant with full rights in one namespace only (bindings, pools, labels
// and annotations there) tries to claim, broaden, conflict with or touch
// another namespace's identity; the operator's guarantees must hold.
var _ = Describe("A tenant with rights in one namespace", func() {
	It("a tenant mirroring every name of another namespace's binding cannot claim, conflict with or touch its identity", func(ctx context.Context) {
		attacker := newNamespace(ctx)
		victim := attacker + "-v"
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: victim}})).To(Succeed())
		createDeployment(ctx, victim, "web", webSelector("web"), map[string]string{"app": "web"})
		createBinding(ctx, victim, "web", "serving", "v1")
		Eventually(readyReason(ctx, victim, "web")).Should(Equal("True"))
		victimEntry := getEntry(ctx, victim, "web")(Default)
		victimRV := victimEntry.ResourceVersion

		By("the attacker mirrors the pool, the names, service account and variant, with a pool that also names the victim's namespace label")
		createDeployment(ctx, attacker, "web", &metav1.LabelSelector{MatchLabels: map[string]string{
			"app": "web", "kubernetes.io/metadata.name": victim,
		}}, map[string]string{"app": "web", "kubernetes.io/metadata.name": victim})
		env := func(e string) bindingOpt {
			return func(b *v1alpha1.IdentityBinding) { b.Labels = map[string]string{labels.Environment: e} }
		}
		createBinding(ctx, attacker, "web", "serving", "v1")
		createBinding(ctx, attacker, "web-prod", "serving", "v2", env("prod"))
		createBinding(ctx, attacker, "web-empty-env", "serving", "v3", env(""))
		// Templates that render under the attacker's own prefix but copy
		// the victim's path after it.
		createBinding(ctx, attacker, "tail", "serving", "v4", withTemplate("ns/{namespace}/sa/{serviceAccount}/ns/"+victim+"/sa/serving/pool/web/variant/v1"))
		// The victim's namespace as the attacker's service account name.
		createBinding(ctx, attacker, "sa-as-ns", victim, "v1", withTemplate("ns/{namespace}/sa/{serviceAccount}/sa/serving/pool/web/variant/v1"))

		for _, name := range []string{"web", "web-prod", "web-empty-env", "tail", "sa-as-ns"} {
			Eventually(readyReason(ctx, attacker, name)).Should(Equal("True"), name)
			b := getBinding(ctx, attacker, name)(Default)
			Expect(b.Status.SPIFFEID).To(HavePrefix("spiffe://"+trustDomain+"/ns/"+attacker+"/sa/"), name)
			Expect(b.Status.Selectors).To(ContainElement("k8s:ns:"+attacker), name)
			for _, s := range b.Status.Selectors {
				Expect(s).NotTo(HavePrefix("k8s:ns:"+victim), name)
			}
		}

		By("the victim keeps its identity, untouched")
		Consistently(func(g Gomega) {
			g.Expect(readyReason(ctx, victim, "web")(g)).To(Equal("True"))
			g.Expect(conflictsOf(ctx, victim, "web")(g)).To(BeEmpty())
			g.Expect(getEntry(ctx, victim, "web")(g).ResourceVersion).To(Equal(victimRV))
		}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("a binding recreated under the same name after its finalizer was removed never adopts the old binding's output", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		createDeployment(ctx, ns, "web2", webSelector("web2"), map[string]string{"app": "web2"})
		old := createBinding(ctx, ns, "a", "serving", "v1")
		Eventually(readyReason(ctx, ns, "a")).Should(Equal("True"))
		oldEntry := getEntry(ctx, ns, "a")(Default)
		Expect(oldEntry.Labels[labels.OwnerUID]).To(Equal(string(getBinding(ctx, ns, "a")(Default).UID)))
		_ = old

		By("the tenant strips the finalizer and deletes the binding: no Delete pass runs")
		b := getBinding(ctx, ns, "a")(Default)
		patch := client.MergeFrom(b.DeepCopy())
		b.Finalizers = nil
		Expect(k8s.Patch(ctx, b, patch)).To(Succeed())
		Expect(k8s.Delete(ctx, b)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &v1alpha1.IdentityBinding{}))
		}).Should(BeTrue())

		By("and at once recreates it under the same name, another pool (another SPIFFE ID, same group)")
		createBinding(ctx, ns, "a", "serving", "v1", withPool("", v1alpha1.DeploymentKind, "web2"))
		newUID := func(g Gomega) string { return string(getBinding(ctx, ns, "a")(g).UID) }

		By("the new binding never holds the old binding's output: whenever it is Ready its entry is its own and is the new spec")
		Eventually(func(g Gomega) {
			nb := getBinding(ctx, ns, "a")(g)
			g.Expect(readyReasonOf(nb)).To(Equal("True"))
			e := getEntry(ctx, ns, "a")(g)
			g.Expect(e.UID).NotTo(Equal(oldEntry.UID))
			g.Expect(e.Labels[labels.OwnerUID]).To(Equal(newUID(g)))
			g.Expect(e.Spec.Selectors).To(ContainElement("k8s:pod-label:app:web2"))
		}).WithTimeout(60 * time.Second).Should(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("more pool labels than a SpiffeEntry holds give a clear condition, no panic and no output", func(ctx context.Context) {
		ns := newNamespace(ctx)
		ml := map[string]string{}
		for i := 0; i < 62; i++ {
			ml[fmt.Sprintf("l%02d.example.com/%s", i, strings.Repeat("k", 60))] = strings.Repeat("v", 63)
		}
		createDeployment(ctx, ns, "web", &metav1.LabelSelector{MatchLabels: ml}, ml)
		createBinding(ctx, ns, "big", "serving", "v1")
		Eventually(readyReason(ctx, ns, "big")).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Expect(failures(getBinding(ctx, ns, "big")(Default))).To(Equal([]string{"RenderFailure=" + v1alpha1.ReasonManagedOutputApplyFailed}))
		Expect(entryExists(ctx, ns, "big")()).To(BeFalse())
		Expect(clusterSPIFFEIDExists(ctx, ns, "big")()).To(BeFalse())
	}, SpecTimeout(time.Minute))

	It("a pool selecting by the boundary label of another variant, or by expressions, is UnsafeSelector and writes nothing", func(ctx context.Context) {
		ns := newNamespace(ctx)
		platform := impersonating("platform", setterGroup, "system:masters")
		createDeploymentAs(ctx, platform, ns, "other-variant", &metav1.LabelSelector{MatchLabels: map[string]string{
			"app": "web", v1alpha1.BoundaryLabel: "stable",
		}}, map[string]string{"app": "web", v1alpha1.BoundaryLabel: "stable"})
		createDeployment(ctx, ns, "exprs", &metav1.LabelSelector{
			MatchLabels:      map[string]string{"app": "web"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}}},
		}, map[string]string{"app": "web"})
		createBinding(ctx, ns, "ov", "serving", "canary", withPool("", v1alpha1.DeploymentKind, "other-variant"))
		createBinding(ctx, ns, "ex", "other", "canary", withPool("", v1alpha1.DeploymentKind, "exprs"))
		Eventually(readyReason(ctx, ns, "ov")).Should(Equal(v1alpha1.ReasonInvalidIdentityBoundary))
		Eventually(readyReason(ctx, ns, "ex")).Should(Equal(v1alpha1.ReasonInvalidPoolSelector))
		Expect(entryExists(ctx, ns, "ov")()).To(BeFalse())
		Expect(entryExists(ctx, ns, "ex")()).To(BeFalse())
	}, SpecTimeout(time.Minute))
})

var _ = spiffev1alpha1.SpiffeEntry{}
var _ = output.Name
