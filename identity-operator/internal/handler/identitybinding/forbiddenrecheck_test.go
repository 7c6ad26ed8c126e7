package identitybinding_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// refuseRealWrites installs an admission policy that answers Forbidden to
// every UPDATE of the object name of group/resource that is not a dry run
// (a webhook declaring sideEffects: NoneOnDryRun that checks less on dry
// runs, which docs/identity-operator.md names), and waits until a real
// write meets it. probe returns a fresh copy of the object to write.
func refuseRealWrites(ctx context.Context, t *testing.T, policy, group, resource, name string, probe func() client.Object) {
	t.Helper()
	g := NewWithT(t)
	refuse(ctx, t, testenv.Refusal{Name: policy,
		Group: group, Resource: resource, Operations: []string{"UPDATE"},
		Expression: fmt.Sprintf("request.dryRun == true || object.metadata.name != %q", name),
		Reason:     "Forbidden", Message: "no real change to this output"})
	g.Eventually(func(g Gomega) {
		obj := probe()
		g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, obj)).To(Succeed())
		// An annotation the handler ignores: a probe that passes before the
		// policy is active changes nothing the binding's pass compares.
		obj.SetAnnotations(map[string]string{"example.org/probe": time.Now().String()})
		err := cp.Client.Update(ctx, obj)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the policy refuses with %v", err)
		g.Expect(cp.Client.Update(ctx, obj, client.DryRunAll)).To(Succeed(), "the policy refuses dry runs too")
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
}

// TestAdmissionThatPassesDryRunsStillWithdrawsARefusedOutput: admission
// refuses the real update of a binding's changed SpiffeEntry with
// Forbidden but lets its dry run pass (a webhook with sideEffects:
// NoneOnDryRun that skips its check on dry runs; here a policy reading
// request.dryRun). The write sent again after the review is the real one,
// refused again, so the refusal reads as admission's and, once it has
// stood, the SpiffeEntry of the old spec goes. (A dry run as the recheck
// passed, and the old output was kept for ever.)
func TestAdmissionThatPassesDryRunsStillWithdrawsARefusedOutput(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	refuseRealWrites(ctx, t, "realonly-"+ns, spiffev1alpha1.GroupVersion.Group, "spiffeentries", name,
		func() client.Object { return &spiffev1alpha1.SpiffeEntry{} })

	b := w.changeHint(ctx, t, "changed")

	passUntilWithdrawn(t, w.h, c, b, func(last error) string {
		return fmt.Sprintf("admission forbids every real update of the SpiffeEntry (a withdrawal retry of 100ms), yet the entry of the old spec is kept; last pass: %v", last)
	})
	g.Expect(failureConditions(b)[v1alpha1.ConditionRenderFailure]).To(Equal(v1alpha1.ReasonManagedOutputApplyFailed), "the refusal is never reported")
}

// clusterSPIFFEIDsOf returns the ClusterSPIFFEIDs owned by b, read
// uncached.
func clusterSPIFFEIDsOf(t *testing.T, b *v1alpha1.IdentityBinding) []unstructured.Unstructured {
	t.Helper()
	l := output.NewList(output.KindClusterSPIFFEID).(*unstructured.UnstructuredList)
	if err := cp.Client.List(context.Background(), l, client.MatchingLabels{labels.OwnerUID: string(b.UID)}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestAdmissionThatPassesDryRunsKeepsNoOutputOfTheOldSpec: with both
// output kinds, admission refuses the real update of the ClusterSPIFFEID
// with Forbidden and passes its dry run. Once the refusal has stood, the
// pass records it ("refused although its dry run had passed") and
// withdraws, so no SpiffeEntry of the new spec stays beside the
// ClusterSPIFFEID of the old one.
func TestAdmissionThatPassesDryRunsKeepsNoOutputOfTheOldSpec(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w := newWebBinding(ctx, t, c, ns)
	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes", WithdrawalRetry: 100 * time.Millisecond,
		APIReader: cp.Client, Outputs: []output.Kind{output.KindSpiffeEntry, output.KindClusterSPIFFEID},
	})
	g.Expect(err).NotTo(HaveOccurred())
	b := w.cached(ctx, t, 1)
	g.Eventually(func() error { return reconcile(t, h, c, b) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	name := output.Name(ns, b.Name)
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Name: name}, output.New(output.KindClusterSPIFFEID))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	refuseRealWrites(ctx, t, "realonly-csid-"+ns, output.ClusterSPIFFEIDGVK().Group, "clusterspiffeids", name,
		func() client.Object { return output.New(output.KindClusterSPIFFEID) })

	b = w.changeHint(ctx, t, "changed")

	var last error
	g.Eventually(func(g Gomega) {
		last = reconcile(t, h, c, b)
		for _, o := range clusterSPIFFEIDsOf(t, b) {
			hint, _, _ := unstructured.NestedString(o.Object, "spec", "hint")
			g.Expect(hint).To(Equal("changed"), "the ClusterSPIFFEID of the old spec is kept")
		}
		if last != nil {
			g.Expect(entriesOf(t, b)).To(BeZero(), "a failing pass keeps the SpiffeEntry it wrote")
		}
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), func() string {
		return fmt.Sprintf("admission forbids every real update of the ClusterSPIFFEID; last pass: %v", last)
	})
}

// TestAnOlderAdmissionRunDoesNotConfirmARoleRefusalMisreadOnce: admission
// forbade a binding's changed SpiffeEntry once (a run of Forbidden answers
// starts), then the policy goes and the operator's role loses update. Once
// the run is older than the withdrawal retry, the next pass's update is
// refused by the role, and its review alone is answered by an authorizer
// that lags (one request on another API server). The recheck is refused
// by the role too, so the refusal reads as admission's; but it is worded
// otherwise than the run's, so it starts a run of its own and the
// SpiffeEntry stays.
func TestAnOlderAdmissionRunDoesNotConfirmARoleRefusalMisreadOnce(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := newNamespace(t)
	u := newRoleUser(ctx, t, "misread-"+ns, true)
	var misread atomic.Int32 // 1: the next review alone answers "allowed"
	var misreadDone atomic.Bool
	cfg := rest.CopyConfig(u.cfg)
	testenv.TamperReviews(cfg, func() testenv.ReviewTamper {
		if misread.CompareAndSwap(1, 0) {
			misreadDone.Store(true)
			return testenv.ReviewAllowed
		}
		return testenv.ReviewAsAnswered
	})
	_, c := cacheAndClientAs(t, cfg)
	w, name := readyWebBinding(ctx, t, c, ns)
	h := w.withDefaultRetry(t)

	policy := refuseEntryUpdates(ctx, t, name, "misread-"+ns)
	b := w.changeHint(ctx, t, "changed")
	started := time.Now()
	err := reconcile(t, h, c, b)
	g.Expect(entriesOf(t, b)).To(Equal(1), "admission's first Forbidden withdrew: %v", err)

	// The policy goes; the role loses update.
	for _, obj := range policy {
		g.Expect(cp.Client.Delete(ctx, obj)).To(Succeed())
	}
	entry := &spiffev1alpha1.SpiffeEntry{}
	g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, entry)).To(Succeed())
	g.Eventually(func() error {
		probe := entry.DeepCopy()
		probe.Spec.Hint = "probe"
		return cp.Client.Update(ctx, probe, client.DryRunAll)
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "the policy still refuses")
	u.setUpdate(false)
	if wait := 2*time.Second + 100*time.Millisecond - time.Since(started); wait > 0 {
		time.Sleep(wait)
	}

	misread.Store(1)
	err = reconcile(t, h, c, b)
	g.Expect(misreadDone.Load()).To(BeTrue(), "the refused update was not reviewed: %v", err)
	g.Expect(entriesOf(t, b)).To(Equal(1),
		"one misread review (a lag of one request, below the 2s retry) withdrew the SpiffeEntry on a refusal by the operator's own role, confirmed by a run admission began %s earlier: %v",
		time.Since(started).Round(time.Millisecond), err)
	g.Expect(ctrlerrors.IsBlocked(err)).To(BeFalse(), "the pass gave up on the binding: %v", err)
}

// TestTheRecordsOfABindingGoneWithoutADeletePassAreForgotten: a binding
// whose finalizer is removed by hand goes without a Delete pass. The
// handler's run of Forbidden answers for it would stay for the life of the
// process; the Controller's call of Forget once it is gone drops it.
func TestTheRecordsOfABindingGoneWithoutADeletePassAreForgotten(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	h := w.withDefaultRetry(t)
	refuseEntryUpdates(ctx, t, name, "leak-"+ns)
	b := w.changeHint(ctx, t, "changed")
	err := reconcile(t, h, c, b)
	g.Expect(identitybinding.RecordsHeld(h)).To(Equal(1), "no run began: %v", err)

	// The binding goes without a Delete pass (its finalizer removed by
	// hand: the harness adds none), as the Controller's NotFound branch
	// sees it.
	g.Expect(cp.Client.Delete(ctx, b)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(b), &v1alpha1.IdentityBinding{}))
	}, 10*time.Second, 50*time.Millisecond).Should(BeTrue())
	// The Controller tells a handler.Forgetter once the binding is gone
	// from the cache (common/controller: "tells a handler that remembers
	// objects to forget one that is gone, though Delete never ran").
	var forgetter handler.Forgetter = h
	forgetter.Forget(client.ObjectKeyFromObject(b))
	g.Expect(identitybinding.RecordsHeld(h)).To(BeZero(), "the run of a binding that is gone is held for ever")
}

// TestAWriteBetweenTheWriteAndItsRecheckDoesNotKeepARefusedOutput:
// admission forbids any change of a binding's SpiffeEntry spec, and
// something else writes the entry (its status: spiffe-operator) between
// the operator's write and the recheck after its review, so the recheck
// conflicts. A conflict keeps the review's reading, so the run goes on
// and, once it has stood, the SpiffeEntry of the old spec goes.
func TestAWriteBetweenTheWriteAndItsRecheckDoesNotKeepARefusedOutput(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var name string
	var bumps atomic.Int32
	cfg := rest.CopyConfig(cp.Config)
	testenv.ObserveRequests(cfg, func(req *http.Request) {
		if name == "" || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/selfsubjectaccessreviews") {
			return
		}
		// Another writer, between the refused write and its recheck.
		e := &spiffev1alpha1.SpiffeEntry{}
		if cp.Client.Get(context.Background(), client.ObjectKey{Name: name}, e) == nil {
			e.SetAnnotations(map[string]string{"example.org/bump": fmt.Sprint(bumps.Add(1))})
			_ = cp.Client.Update(context.Background(), e)
		}
	})
	_, c := cacheAndClientAs(t, cfg)
	ns := newNamespace(t)
	w, entryName := readyWebBinding(ctx, t, c, ns)
	refuse(ctx, t, testenv.Refusal{Name: "specfrozen-" + ns,
		Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries", Operations: []string{"UPDATE"},
		Expression: fmt.Sprintf("object.metadata.name != %q || object.spec == oldObject.spec", entryName),
		Reason:     "Forbidden", Message: "the spec of this entry is frozen"})
	g.Eventually(func() bool {
		probe := &spiffev1alpha1.SpiffeEntry{}
		g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: entryName}, probe)).To(Succeed())
		probe.Spec.Hint = "probe"
		return apierrors.IsForbidden(cp.Client.Update(ctx, probe, client.DryRunAll))
	}, 30*time.Second, 50*time.Millisecond).Should(BeTrue(), "the policy does not refuse")
	name = entryName

	b := w.changeHint(ctx, t, "changed")
	passUntilWithdrawn(t, w.h, c, b, func(last error) string {
		return fmt.Sprintf("admission forbids the change on every pass (%d writes by another between write and recheck), yet the entry of the old spec is kept; last pass: %v", bumps.Load(), last)
	})
}
