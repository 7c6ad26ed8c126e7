package controller_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

// The operator's own role may refuse a write: a role edited by hand, or
// one from an older release. The API server answers 403 Forbidden, as a
// denying admission webhook does, but the refusal says nothing of the
// binding's spec, and every binding whose output must change meets it.
// Withdrawing their outputs would take the identity of every such workload
// at once (where the role still allows delete). The output stays, the
// binding names the permission to grant, and it converges once granted.
var _ = Describe("An operator whose role may create but not update SpiffeEntries", func() {
	It("keeps a binding's SpiffeEntry when its spec changes, names the missing permission, and converges once it is granted", func(ctx SpecContext) {
		const spiffeEntryRule = "  - spiffeentries\n  verbs:\n  - create\n  - delete\n  - get\n  - list\n  - patch\n  - update\n  - watch\n"
		r := startWithRole(ctx, 0, roleEdited(spiffeEntryRule, "  - spiffeentries\n  verbs:\n  - create\n  - delete\n  - get\n  - list\n  - watch\n"))

		uid, entryUID := r.readyEntry("web")

		By("changing the spec: the SpiffeEntry's update is forbidden by the operator's role")
		b := r.setHint("web", "changed")
		Eventually(r.reason("web")).WithTimeout(30 * time.Second).Should(Equal(v1alpha1.ReasonOperatorForbidden))
		Expect(r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "web"}, b)).To(Succeed())
		ready := meta.FindStatusCondition(b.Status.Conditions, "Ready")
		Expect(ready.Message).To(And(ContainSubstring("update"), ContainSubstring("spiffeentries")), "the condition does not say what to grant")
		Expect(failures(b)).To(BeEmpty(), "a refusal of the operator is reported as a failure of the spec")
		Consistently(entryUID).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(uid))

		By("granting update: the binding converges on the same SpiffeEntry")
		r.grant(rbacv1.PolicyRule{APIGroups: []string{spiffev1alpha1.GroupVersion.Group}, Resources: []string{"spiffeentries"}, Verbs: []string{"update", "patch"}})
		Eventually(r.reason("web")).WithTimeout(time.Minute).Should(Equal("True"))
		entry := &spiffev1alpha1.SpiffeEntry{}
		Expect(r.c.Get(ctx, client.ObjectKey{Name: output.Name(r.ns, "web")}, entry)).To(Succeed())
		Expect(entry.UID).To(Equal(uid))
		Expect(entry.Spec.Hint).To(Equal("changed"))
	}, SpecTimeout(2*time.Minute))
})

// setHint sets the hint of binding name and returns the binding as
// updated.
func (r *poolVerbsRun) setHint(name, hint string) *v1alpha1.IdentityBinding {
	GinkgoHelper()
	b := &v1alpha1.IdentityBinding{}
	Expect(r.c.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, b)).To(Succeed())
	b.Spec.Hint = hint
	Expect(r.c.Update(r.ctx, b)).To(Succeed())
	return b
}

// grant adds rule to the operator's ClusterRole on r's control plane.
func (r *poolVerbsRun) grant(rule rbacv1.PolicyRule) {
	GinkgoHelper()
	role := &rbacv1.ClusterRole{}
	Expect(r.c.Get(r.ctx, client.ObjectKey{Name: r.roleName}, role)).To(Succeed())
	role.Rules = append(role.Rules, rule)
	Expect(r.c.Update(r.ctx, role)).To(Succeed())
}

// roleName reads the name of the ClusterRole in roleFile.
func roleName(roleFile string) string {
	GinkgoHelper()
	data, err := os.ReadFile(roleFile)
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(data, role)).To(Succeed())
	return role.Name
}

// generatedRole is the path of the operator's generated ClusterRole.
func generatedRole() string {
	return filepath.Join(testsupport.ModuleRoot(), "config", "rbac", "role.yaml")
}

// A binding whose spec admission refuses has failed
// (RenderFailure/ManagedOutputApplyFailed, no output). The operator's role
// then loses create on SpiffeEntries. RBAC is judged before admission, so
// the next pass meets the operator's refusal and cannot judge the output
// again: the binding reports OperatorForbidden and keeps reporting the
// refusal of its unchanged spec (seen failing before: the RenderFailure
// was dropped, as if the spec had passed).
var _ = Describe("A binding admission refused, then an operator role without create", func() {
	It("keeps reporting the refusal of the unchanged spec", func(ctx SpecContext) {
		r := startWithRole(ctx, 0, generatedRole())
		r.bindToDeployment("web")
		Eventually(r.reason("web")).WithTimeout(30 * time.Second).Should(Equal("True"))
		key := client.ObjectKey{Name: output.Name(r.ns, "web")}
		entry := &spiffev1alpha1.SpiffeEntry{}
		Expect(r.c.Get(ctx, key, entry)).To(Succeed())

		By("an admission policy refusing SpiffeEntries with hint bad")
		refuseHint(r, "refuse-bad-hint")
		probe := &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: entry.Spec}
		probe.Spec.Hint = "bad"
		Eventually(func() bool { return apierrors.IsForbidden(r.c.Create(ctx, probe.DeepCopy(), client.DryRunAll)) }).
			WithTimeout(time.Minute).Should(BeTrue())

		By("the tenant sets hint bad: admission refuses, the binding fails and withdraws")
		b := r.setHint("web", "bad")
		Eventually(r.reason("web")).WithTimeout(30 * time.Second).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Eventually(func() bool { return apierrors.IsNotFound(r.c.Get(ctx, key, &spiffev1alpha1.SpiffeEntry{})) }).WithTimeout(30 * time.Second).Should(BeTrue())
		// The pass that withdraws writes its status after the delete: wait
		// for it rather than read the status once.
		Eventually(func(g Gomega) []string {
			g.Expect(r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "web"}, b)).To(Succeed())
			return failures(b)
		}).WithTimeout(30 * time.Second).Should(ContainElement(v1alpha1.ConditionRenderFailure + "=" + v1alpha1.ReasonManagedOutputApplyFailed))

		By("the operator's role loses create on SpiffeEntries; a label change runs a pass")
		r.revokeSpiffeEntryVerbs("create")
		n := 0
		Eventually(func(g Gomega) string {
			n++
			cur := &v1alpha1.IdentityBinding{}
			g.Expect(r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "web"}, cur)).To(Succeed())
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels["touch"] = fmt.Sprint(n)
			g.Expect(r.c.Update(ctx, cur)).To(Succeed())
			return r.reason("web")(g)
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Equal(v1alpha1.ReasonOperatorForbidden))

		Expect(apierrors.IsForbidden(r.c.Create(ctx, probe.DeepCopy(), client.DryRunAll))).To(BeTrue(), "admission still refuses the spec")
		Expect(r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "web"}, b)).To(Succeed())
		Expect(failures(b)).To(ContainElement(v1alpha1.ConditionRenderFailure+"="+v1alpha1.ReasonManagedOutputApplyFailed),
			"the unchanged spec's refusal by admission was dropped from the status: conditions %+v", b.Status.Conditions)
	}, SpecTimeout(3*time.Minute))
})

// refuseHint installs on r's control plane a ValidatingAdmissionPolicy that
// forbids SpiffeEntries whose hint is "bad".
func refuseHint(r *poolVerbsRun, name string) {
	GinkgoHelper()
	_, err := testenv.RefuseWrites(r.ctx, r.c, testenv.Refusal{Name: name, Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries",
		Operations: []string{"CREATE", "UPDATE"}, Expression: "!has(object.spec.hint) || object.spec.hint != 'bad'", Reason: "Forbidden", Message: "hint bad"})
	Expect(err).NotTo(HaveOccurred())
}

// revokeSpiffeEntryVerbs removes verbs from every rule of the operator's
// ClusterRole that names spiffeentries.
func (r *poolVerbsRun) revokeSpiffeEntryVerbs(verbs ...string) {
	GinkgoHelper()
	role := &rbacv1.ClusterRole{}
	Expect(r.c.Get(r.ctx, client.ObjectKey{Name: r.roleName}, role)).To(Succeed())
	for i, rule := range role.Rules {
		if slices.Contains(rule.Resources, "spiffeentries") {
			role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return slices.Contains(verbs, v) })
		}
	}
	Expect(r.c.Update(r.ctx, role)).To(Succeed())
}

// readyEntry binds a binding named name to the Deployment name, waits
// until it is Ready, and returns its SpiffeEntry's UID and a reader of
// the UID it has now (failing if the SpiffeEntry is gone).
func (r *poolVerbsRun) readyEntry(name string) (types.UID, func(Gomega) types.UID) {
	GinkgoHelper()
	r.bindToDeployment(name)
	Eventually(r.reason(name)).WithTimeout(30 * time.Second).Should(Equal("True"))
	key := client.ObjectKey{Name: output.Name(r.ns, name)}
	entry := &spiffev1alpha1.SpiffeEntry{}
	Expect(r.c.Get(r.ctx, key, entry)).To(Succeed())
	return entry.UID, func(g Gomega) types.UID {
		cur := &spiffev1alpha1.SpiffeEntry{}
		g.Expect(r.c.Get(r.ctx, key, cur)).To(Succeed(), "the SpiffeEntry was withdrawn")
		return cur.UID
	}
}
