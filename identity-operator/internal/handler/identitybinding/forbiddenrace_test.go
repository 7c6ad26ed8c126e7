package identitybinding_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// TestARoleGrantedBetweenTheWriteAndItsReviewDoesNotWithdrawTheOutputs:
// the operator's role may not update SpiffeEntries, and a binding's spec
// changes. The update is forbidden; the role is granted the verb before
// the operator asks whether it may make the write (an administrator fixing
// the role while bindings retry, or an API server whose authorizer lags
// another's), so the review says "allowed" and the refusal reads as
// admission's. The pass must not withdraw the SpiffeEntry on that alone:
// the next pass writes it.
func TestARoleGrantedBetweenTheWriteAndItsReviewDoesNotWithdrawTheOutputs(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := newNamespace(t)
	user := "race-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{spiffev1alpha1.GroupVersion.Group}, Resources: []string{"spiffeentries"},
		Verbs: []string{"create", "delete", "get", "list", "watch"}}}}
	g.Expect(cp.Client.Create(ctx, role)).To(Succeed())
	g.Expect(cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())

	// The operator writes as user; the first review it asks is preceded
	// by the grant, effective before the review leaves.
	userCfg, err := cp.UserConfig(user, []string{"system:authenticated"})
	g.Expect(err).NotTo(HaveOccurred())
	userCfg = rest.CopyConfig(userCfg)
	var armed sync.Once
	grant := func() {
		cur := &rbacv1.ClusterRole{}
		g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: user}, cur)).To(Succeed())
		cur.Rules[0].Verbs = append(cur.Rules[0].Verbs, "update")
		g.Expect(cp.Client.Update(ctx, cur)).To(Succeed())
		g.Eventually(func() bool {
			r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
				Groups: []string{"system:authenticated"}, ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: "update", Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries"}}}
			g.Expect(cp.Client.Create(ctx, r)).To(Succeed())
			return r.Status.Allowed
		}, 30*time.Second, 20*time.Millisecond).Should(BeTrue(), "the grant never took effect")
	}
	var reviews int
	testenv.ObserveRequests(userCfg, func(req *http.Request) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/selfsubjectaccessreviews") {
			reviews++
			armed.Do(grant)
		}
	})
	_, c := cacheAndClientAs(t, userCfg)

	w := newWebBinding(ctx, t, c, ns)
	h, b := w.h, w.cached(ctx, t, 1)
	g.Expect(reconcile(t, h, c, b)).To(Succeed())
	name := output.Name(ns, b.Name)
	entry := &spiffev1alpha1.SpiffeEntry{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Name: name}, entry) }, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	uid := entry.UID

	b.Spec.Hint = "changed"
	g.Expect(cp.Client.Update(ctx, b)).To(Succeed())
	b = w.cached(ctx, t, b.Generation)
	err = reconcile(t, h, c, b)
	g.Expect(reviews).To(Equal(1), "the forbidden update was not reviewed")
	g.Expect(ctrlerrors.IsBlocked(err)).To(BeFalse(), "the pass gave up on the binding: %v", err)
	_, retryable := ctrlerrors.AsRetryable(err)
	g.Expect(retryable).To(BeTrue(), "the pass is not retried: %v", err)
	g.Expect(entriesOf(t, b)).To(Equal(1), "the SpiffeEntry was withdrawn on a refusal by the operator's own role: %v", err)

	g.Expect(reconcile(t, h, c, b)).To(Succeed())
	g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, entry)).To(Succeed())
	g.Expect(entry.UID).To(Equal(uid))
	g.Expect(entry.Spec.Hint).To(Equal("changed"))
}
