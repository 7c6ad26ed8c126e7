package identitybinding_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// admission's. The pass must not withdraw the SpiffeEntry on that: it
// sends the update again after the review, and it is made.
func TestARoleGrantedBetweenTheWriteAndItsReviewDoesNotWithdrawTheOutputs(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := newNamespace(t)
	u := newRoleUser(ctx, t, "race-"+ns, false)
	// The first review the operator asks is preceded by the grant.
	u.arm()
	_, c := cacheAndClientAs(t, u.cfg)

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
	// The update is refused, the grant lands, the review allows it, and
	// the update sent again after the review is made.
	g.Expect(reconcile(t, h, c, b)).To(Succeed())
	g.Expect(u.reviews.Load()).To(BeEquivalentTo(1), "the forbidden update was not reviewed")
	g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, entry)).To(Succeed())
	g.Expect(entry.UID).To(Equal(uid), "the SpiffeEntry was withdrawn on a refusal by the operator's own role")
	g.Expect(entry.Spec.Hint).To(Equal("changed"))
}

// TestARoleGrantedBetweenTheWriteAndItsReviewDoesNotConfirmAnOlderRefusal:
// admission forbade a binding's changed SpiffeEntry once, which starts a
// run of Forbidden answers. Then the policy goes, and the operator's role
// loses update. Once the run is older than the withdrawal retry, the next
// pass's update is refused by the role, and the verb is granted back just
// before the review, which says "allowed". Were that refusal taken for
// admission's, the run would confirm it at once and withdraw the
// SpiffeEntry; the update sent again after the review is made.
func TestARoleGrantedBetweenTheWriteAndItsReviewDoesNotConfirmAnOlderRefusal(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := newNamespace(t)
	u := newRoleUser(ctx, t, "older-"+ns, true)
	_, c := cacheAndClientAs(t, u.cfg)
	w, name := readyWebBinding(ctx, t, c, ns)
	h := w.h
	entry := &spiffev1alpha1.SpiffeEntry{}
	g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, entry)).To(Succeed())
	uid := entry.UID

	policy := refuseEntryUpdates(ctx, t, name, "older-"+ns)
	b := w.changeHint(ctx, t, "changed")
	started := time.Now()
	err := reconcile(t, h, c, b)
	g.Expect(apierrors.IsForbidden(err) || entriesOf(t, b) != 1).To(BeFalse(), "admission's first Forbidden withdrew, or was final: %v", err)

	// The policy goes; the role loses update.
	for _, obj := range policy {
		g.Expect(cp.Client.Delete(ctx, obj)).To(Succeed())
	}
	g.Eventually(func() error {
		probe := entry.DeepCopy()
		probe.Spec.Hint = "probe"
		return cp.Client.Update(ctx, probe, client.DryRunAll)
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "the policy still refuses")
	u.setUpdate(false)
	g.Expect(time.Since(started)).To(BeNumerically(">", 100*time.Millisecond), "the run is not older than the withdrawal retry")

	u.arm()
	err = reconcile(t, h, c, b)
	g.Expect(u.granted.Load()).To(BeTrue(), "the refused update was not reviewed")
	g.Expect(err).NotTo(HaveOccurred(), "the update sent again after the review was not made")
	g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, entry)).To(Succeed(),
		"a refusal by the operator's own role confirmed an older refusal by admission")
	g.Expect(entry.UID).To(Equal(uid))
	g.Expect(entry.Spec.Hint).To(Equal("changed"))
}

// roleUser is a user whose ClusterRole lets it create, delete and read
// SpiffeEntries, and update them as setUpdate says; cfg writes as it.
type roleUser struct {
	ctx  context.Context
	t    *testing.T
	name string
	cfg  *rest.Config
	// reviews counts the user's SelfSubjectAccessReviews; once armed, the
	// next review is preceded by a grant of update (granted).
	reviews, armed atomic.Int32
	granted        atomic.Bool
}

// newRoleUser creates the user's role, with update if update.
func newRoleUser(ctx context.Context, t *testing.T, name string, update bool) *roleUser {
	t.Helper()
	g := NewWithT(t)
	g.Expect(cp.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{spiffev1alpha1.GroupVersion.Group}, Resources: []string{"spiffeentries"},
		Verbs: []string{"create", "delete", "get", "list", "watch"}}}})).To(Succeed())
	g.Expect(cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}})).To(Succeed())
	cfg, err := cp.UserConfig(name, []string{"system:authenticated"})
	g.Expect(err).NotTo(HaveOccurred())
	u := &roleUser{ctx: ctx, t: t, name: name, cfg: rest.CopyConfig(cfg)}
	testenv.ObserveRequests(u.cfg, func(req *http.Request) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/selfsubjectaccessreviews") {
			u.reviews.Add(1)
			if u.armed.CompareAndSwap(1, 0) {
				u.setUpdate(true)
				u.granted.Store(true)
			}
		}
	})
	if update {
		u.setUpdate(true)
	}
	return u
}

// arm has the next review preceded by a grant of update.
func (u *roleUser) arm() { u.armed.Store(1) }

// setUpdate grants or revokes update, and waits until the authorizer
// agrees.
func (u *roleUser) setUpdate(allowed bool) {
	g := NewWithT(u.t)
	cur := &rbacv1.ClusterRole{}
	g.Expect(cp.Client.Get(u.ctx, client.ObjectKey{Name: u.name}, cur)).To(Succeed())
	verbs := []string{"create", "delete", "get", "list", "watch"}
	if allowed {
		verbs = append(verbs, "update")
	}
	cur.Rules[0].Verbs = verbs
	g.Expect(cp.Client.Update(u.ctx, cur)).To(Succeed())
	g.Eventually(func() bool {
		r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: u.name,
			Groups: []string{"system:authenticated"}, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "update", Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries"}}}
		g.Expect(cp.Client.Create(u.ctx, r)).To(Succeed())
		return r.Status.Allowed
	}, 30*time.Second, 20*time.Millisecond).Should(Equal(allowed), "the role change never took effect")
}
