package identitybinding_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// TestAForbiddenAnswerIsConfirmedOnlyByThePassJustAfterIt: admission
// forbids the update of a binding's SpiffeEntry; the next pass's update
// fails for another reason (the API server answers 413), and the pass
// after that is forbidden again. That third Forbidden is the first of a
// new run and keeps the SpiffeEntry: an answer two passes old says
// nothing of this one (the role granted between a write and its review,
// which reads the same, could have happened at any pass in between). The
// pass after it, forbidden again, confirms the refusal and withdraws.
func TestAForbiddenAnswerIsConfirmedOnlyByThePassJustAfterIt(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w := newWebBinding(ctx, t, c, ns)
	h, b := w.h, w.b
	g.Eventually(func() error { return reconcile(t, h, c, w.cached(ctx, t, 1)) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	name := output.Name(ns, b.Name)
	entry := &spiffev1alpha1.SpiffeEntry{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Name: name}, entry) }, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	// Admission refuses every update of this SpiffeEntry, with one reason
	// at a time.
	var installed []client.Object
	lift := func() {
		for _, obj := range installed {
			g.Expect(client.IgnoreNotFound(cp.Client.Delete(context.Background(), obj))).To(Succeed())
		}
		installed = nil
	}
	t.Cleanup(lift)
	refuseWith := func(reason string, is func(error) bool) {
		lift()
		created, err := testenv.RefuseWrites(ctx, cp.Client, testenv.Refusal{Name: strings.ToLower(reason) + "-" + ns,
			Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries", Operations: []string{"UPDATE"},
			Expression: fmt.Sprintf("object.metadata.name != %q", name), Reason: reason, Message: "no change to this entry"})
		installed = created
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			probe := &spiffev1alpha1.SpiffeEntry{}
			g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, probe)).To(Succeed())
			probe.Spec.Hint = "probe"
			err := cp.Client.Update(ctx, probe, client.DryRunAll)
			g.Expect(is(err)).To(BeTrue(), "the policy refuses with %v", err)
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "the policy does not refuse with %s", reason)
	}
	refuseWith("Forbidden", apierrors.IsForbidden)

	b = w.cached(ctx, t, 1)
	b.Spec.Hint = "changed"
	g.Expect(cp.Client.Update(ctx, b)).To(Succeed())
	b = w.cached(ctx, t, b.Generation)
	keeps := func(pass string) {
		err := reconcile(t, h, c, b)
		g.Expect(ctrlerrors.IsBlocked(err)).To(BeFalse(), "%s: the pass gave up on the binding: %v", pass, err)
		g.Expect(err).To(HaveOccurred(), "%s: the pass succeeded", pass)
		g.Expect(entriesOf(t, b)).To(Equal(1), "%s: the SpiffeEntry was withdrawn: %v", pass, err)
	}
	keeps("the first Forbidden")

	refuseWith("RequestEntityTooLarge", apierrors.IsRequestEntityTooLargeError)
	keeps("a write refused for another reason")

	refuseWith("Forbidden", apierrors.IsForbidden)
	keeps("the first Forbidden after another answer")

	// The next pass meets it again: admission's refusal stands, and the
	// output of the old spec goes.
	err := reconcile(t, h, c, b)
	g.Expect(ctrlerrors.IsBlocked(err) || apierrors.IsForbidden(err)).To(BeTrue(), "a confirmed refusal is not final: %v", err)
	g.Eventually(func() int { return entriesOf(t, b) }, 10*time.Second, 50*time.Millisecond).Should(BeZero(),
		"a refusal met on two passes in a row did not withdraw the SpiffeEntry")
}
