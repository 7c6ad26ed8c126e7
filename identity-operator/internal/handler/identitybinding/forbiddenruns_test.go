package identitybinding_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// refuse installs r until the test ends (testenv.RefuseWrites) and
// returns its objects.
func refuse(ctx context.Context, t *testing.T, r testenv.Refusal) []client.Object {
	t.Helper()
	created, err := testenv.RefuseWrites(ctx, cp.Client, r)
	t.Cleanup(func() {
		for _, obj := range created {
			_ = client.IgnoreNotFound(cp.Client.Delete(context.Background(), obj))
		}
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return created
}

// refuseEntryUpdates installs an admission policy that refuses every
// update of the SpiffeEntry name with reason (Forbidden unless given),
// waits until a dry run meets that refusal, and
// returns the policy's objects (deleted when the test ends).
func refuseEntryUpdates(ctx context.Context, t *testing.T, name, policy string, reason ...string) []client.Object {
	t.Helper()
	g := NewWithT(t)
	why, is := "Forbidden", apierrors.IsForbidden
	if len(reason) > 0 && reason[0] != why {
		why, is = reason[0], func(err error) bool { return apierrors.ReasonForError(err) == metav1.StatusReason(reason[0]) }
	}
	created := refuse(ctx, t, testenv.Refusal{Name: policy,
		Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries", Operations: []string{"UPDATE"},
		Expression: fmt.Sprintf("object.metadata.name != %q", name), Reason: why, Message: "no change to this entry"})
	g.Eventually(func(g Gomega) {
		probe := &spiffev1alpha1.SpiffeEntry{}
		g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, probe)).To(Succeed())
		probe.Spec.Hint = "probe"
		err := cp.Client.Update(ctx, probe, client.DryRunAll)
		g.Expect(is(err)).To(BeTrue(), "the policy refuses with %v", err)
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "the policy does not refuse with %s", why)
	return created
}

// readyWebBinding creates a Ready binding "b" with its SpiffeEntry,
// written through c, and returns it with the entry's name.
func readyWebBinding(ctx context.Context, t *testing.T, c client.Client, ns string) (*webBinding, string) {
	t.Helper()
	g := NewWithT(t)
	w := newWebBinding(ctx, t, c, ns)
	g.Eventually(func() error { return reconcile(t, w.h, c, w.cached(ctx, t, 1)) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	name := output.Name(ns, w.b.Name)
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Name: name}, &spiffev1alpha1.SpiffeEntry{}) },
		10*time.Second, 50*time.Millisecond).Should(Succeed())
	return w, name
}

// TestAReviewFailingEveryOtherPassDoesNotKeepARefusedOutput: admission
// forbids the update of a binding's changed SpiffeEntry, and the
// operator's review fails on every other pass (an API server shedding
// load, a storage timeout). A pass whose review fails is no confirmation,
// but it must not end the run of Forbidden answers either: else no run
// ever stands long enough, and the output of the old spec stays for ever
// with no refusal reported.
func TestAReviewFailingEveryOtherPassDoesNotKeepARefusedOutput(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var fail atomic.Bool
	var seen atomic.Int32
	cfg := rest.CopyConfig(cp.Config)
	testenv.TamperReviews(cfg, func() testenv.ReviewTamper {
		seen.Add(1)
		if fail.Load() {
			return testenv.ReviewFailed
		}
		return testenv.ReviewAsAnswered
	})
	_, c := cacheAndClientAs(t, cfg)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	refuseEntryUpdates(ctx, t, name, "flaky-"+ns)

	b := w.changeHint(ctx, t, "changed")

	// Passes alternate: one meets admission's Forbidden with a review that
	// says the operator's role allows the write, the next a failed review.
	var last error
	var passes int
	g.Eventually(func() int {
		fail.Store(passes%2 == 1)
		passes++
		last = reconcile(t, w.h, c, b)
		return entriesOf(t, b)
	}, 10*time.Second, 50*time.Millisecond).Should(BeZero(),
		"admission forbade the update on every other pass, yet the SpiffeEntry of the old spec is kept; last pass: %v", last)
	g.Expect(seen.Load()).To(BeNumerically(">=", 2), "the forbidden updates were not reviewed")
	rf := failureConditions(b)[v1alpha1.ConditionRenderFailure]
	g.Expect(rf).To(Equal(v1alpha1.ReasonManagedOutputApplyFailed), "the refusal is never reported")
}

// TestAnImmediatePassDuringAnAuthorizerLagDoesNotWithdraw: the operator's
// role may not update SpiffeEntries, and for a second the reviews are
// answered by an authorizer that already allows it (API servers whose
// authorizers disagree). A pass right after the first (any event: a
// rollout, a tenant annotating its Deployment) meets the same misread;
// the refusal has not stood for the withdrawal retry, so the SpiffeEntry
// of the running workload stays.
func TestAnImmediatePassDuringAnAuthorizerLagDoesNotWithdraw(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := newNamespace(t)
	user := "lag-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{spiffev1alpha1.GroupVersion.Group}, Resources: []string{"spiffeentries"},
		Verbs: []string{"create", "delete", "get", "list", "watch"}}}}
	g.Expect(cp.Client.Create(ctx, role)).To(Succeed())
	g.Expect(cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
	userCfg, err := cp.UserConfig(user, []string{"system:authenticated"})
	g.Expect(err).NotTo(HaveOccurred())
	userCfg = rest.CopyConfig(userCfg)

	// The lag: from the first review on, for one second, reviews are
	// answered by an authorizer that already allows the update.
	var mu sync.Mutex
	var lagUntil time.Time
	var seen atomic.Int32
	allow := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if lagUntil.IsZero() {
			lagUntil = time.Now().Add(time.Second)
		}
		return time.Now().Before(lagUntil)
	}
	testenv.TamperReviews(userCfg, func() testenv.ReviewTamper {
		seen.Add(1)
		if allow() {
			return testenv.ReviewAllowed
		}
		return testenv.ReviewAsAnswered
	})
	_, c := cacheAndClientAs(t, userCfg)
	w, _ := readyWebBinding(ctx, t, c, ns)
	h := w.withDefaultRetry(t)

	b := w.changeHint(ctx, t, "changed")

	start := time.Now()
	err = reconcile(t, h, c, b)
	g.Expect(seen.Load()).To(BeEquivalentTo(1), "the forbidden update was not reviewed: %v", err)
	g.Expect(entriesOf(t, b)).To(Equal(1), "the first pass withdrew: %v", err)
	var retry time.Duration
	if r, ok := ctrlerrors.AsRetryable(err); ok {
		retry = r.Delay
	}
	// An event-triggered pass, at once.
	err = reconcile(t, h, c, b)
	elapsed := time.Since(start)
	g.Expect(seen.Load()).To(BeEquivalentTo(2), "the second update was not reviewed: %v", err)
	g.Expect(entriesOf(t, b)).To(Equal(1),
		"a refusal by the operator's own role withdrew the SpiffeEntry: two passes %s apart (the first asked for a retry in %s) both met the same 1s authorizer lag: %v",
		elapsed.Round(time.Millisecond), retry, err)
}

// TestSpecChurnDoesNotKeepARefusedOutput: admission forbids the update of
// a binding's SpiffeEntry, and whoever edits the binding (a tenant, a
// GitOps tool stamping a field) changes its spec before every pass. A
// change of spec does not end the run of Forbidden answers (a refusal by
// the role does not depend on the spec), so the SpiffeEntry of the
// original spec is withdrawn once the run has stood.
func TestSpecChurnDoesNotKeepARefusedOutput(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	refuseEntryUpdates(ctx, t, name, "churn-"+ns)

	original := &spiffev1alpha1.SpiffeEntry{}
	g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, original)).To(Succeed())
	var last error
	var edits int
	g.Eventually(func() bool {
		b := w.cached(ctx, t, 1)
		b.Spec.Hint = fmt.Sprintf("churn-%d", edits)
		edits++
		g.Expect(cp.Client.Update(ctx, b)).To(Succeed())
		b = w.cached(ctx, t, b.Generation)
		last = reconcile(t, w.h, c, b)
		cur := &spiffev1alpha1.SpiffeEntry{}
		err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, cur)
		return apierrors.IsNotFound(err) || (err == nil && cur.UID != original.UID)
	}, 10*time.Second, 50*time.Millisecond).Should(BeTrue(),
		"every pass met admission's Forbidden, yet the SpiffeEntry of the original spec is kept: %v", last)
}

// TestBindingsOfTwoNamespacesDoNotConfirmEachOthersRefusal: one handler
// reconciles two namespaces' bindings whose updates admission forbids,
// their passes interleaved. Each binding's run is its own: B's Forbidden
// neither confirms A's nor is confirmed by A's withdrawal.
func TestBindingsOfTwoNamespacesDoNotConfirmEachOthersRefusal(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	nsA, nsB := newNamespace(t), newNamespace(t)
	wa, nameA := readyWebBinding(ctx, t, c, nsA)
	wb, nameB := readyWebBinding(ctx, t, c, nsB)
	refuseEntryUpdates(ctx, t, nameA, "refuse-a-"+nsA)
	refuseEntryUpdates(ctx, t, nameB, "refuse-b-"+nsB)
	h := wa.h // one handler, as in the operator
	change := func(w *webBinding) *v1alpha1.IdentityBinding {
		b := w.cached(ctx, t, 1)
		b.Spec.Hint = "changed"
		g.Expect(cp.Client.Update(ctx, b)).To(Succeed())
		return w.cached(ctx, t, b.Generation)
	}
	a, b := change(wa), change(wb)

	err := reconcile(t, h, c, a)
	g.Expect(entriesOf(t, a)).To(Equal(1), "A's first Forbidden withdrew: %v", err)
	err = reconcile(t, h, c, b)
	g.Expect(entriesOf(t, b)).To(Equal(1), "B's first Forbidden, just after A's, withdrew B's entry: %v", err)
	g.Eventually(func() int { _ = reconcile(t, h, c, a); return entriesOf(t, a) }, 10*time.Second, 50*time.Millisecond).Should(BeZero(), "A's confirmed refusal did not withdraw")
	g.Expect(entriesOf(t, b)).To(Equal(1), "A's confirmation withdrew B's entry")
	g.Eventually(func() int { _ = reconcile(t, h, c, b); return entriesOf(t, b) }, 10*time.Second, 50*time.Millisecond).Should(BeZero(), "B's confirmed refusal did not withdraw")
}

// TestARunOfForbiddenAnswersEndsAfterThreeOtherFailuresInARow: admission
// forbids the update of a binding's SpiffeEntry, then answers 413 to three
// passes in a row, then forbids it again. The run of Forbidden answers
// bears two other failures (a review that fails now and then must not keep
// an output admission refuses for ever), not three: the Forbidden after
// them starts a new run and keeps the SpiffeEntry, though the first was
// met longer ago than the withdrawal retry. The passes after it withdraw
// once the new run has stood that long.
func TestARunOfForbiddenAnswersEndsAfterThreeOtherFailuresInARow(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	h := w.h

	// Admission refuses every update of this SpiffeEntry, with one reason
	// at a time.
	var installed []client.Object
	refuseWith := func(reason string) {
		for _, obj := range installed {
			g.Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, obj))).To(Succeed())
		}
		installed = refuseEntryUpdates(ctx, t, name, strings.ToLower(reason)+"-"+ns, reason)
	}
	refuseWith("Forbidden")

	b := w.changeHint(ctx, t, "changed")
	keeps := func(pass string) {
		err := reconcile(t, h, c, b)
		g.Expect(ctrlerrors.IsBlocked(err)).To(BeFalse(), "%s: the pass gave up on the binding: %v", pass, err)
		g.Expect(err).To(HaveOccurred(), "%s: the pass succeeded", pass)
		g.Expect(entriesOf(t, b)).To(Equal(1), "%s: the SpiffeEntry was withdrawn: %v", pass, err)
	}
	first := time.Now()
	keeps("the first Forbidden")

	refuseWith("RequestEntityTooLarge")
	for i := 1; i <= 3; i++ {
		keeps(fmt.Sprintf("write %d refused for another reason", i))
	}

	refuseWith("Forbidden")
	g.Expect(time.Since(first)).To(BeNumerically(">", 100*time.Millisecond), "the withdrawal retry has not passed since the first Forbidden")
	keeps("the first Forbidden after three other answers")

	// The passes after it meet it again until the run has stood for the
	// withdrawal retry: admission's refusal stands, and the output of the
	// old spec goes.
	var err error
	g.Eventually(func() int {
		err = reconcile(t, h, c, b)
		return entriesOf(t, b)
	}, 10*time.Second, 50*time.Millisecond).Should(BeZero(), "a refusal that stood did not withdraw the SpiffeEntry")
	g.Expect(ctrlerrors.IsBlocked(err) || apierrors.IsForbidden(err) || err != nil).To(BeTrue(), "a withdrawal for a refusal is no failure: %v", err)
}
