package identitybinding_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// TestAPassThatPanicsDoesNotKeepARefusedOutput: admission forbids the
// update of a binding's changed SpiffeEntry, and every other pass panics
// before it reaches the outputs (a fault in a pool read; the Controller
// turns a panic into a failed pass and runs it again). A pass that panics
// is one that failed otherwise: it must not end the run of Forbidden
// answers, else no run stands for the withdrawal retry and the output of
// the old spec stays for ever.
func TestAPassThatPanicsDoesNotKeepARefusedOutput(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, base := cacheAndClient(t)
	var fault atomic.Bool
	var panicked atomic.Int32
	c := &panickyPoolReads{Client: base, fault: &fault, panicked: &panicked}
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	refuseEntryUpdates(ctx, t, name, "panicky-"+ns)

	b := w.changeHint(ctx, t, "changed")

	pass := func(panics bool) (err error) {
		fault.Store(panics)
		defer func() {
			if p := recover(); p != nil && !panics {
				t.Fatalf("a pass panicked unasked: %v", p)
			}
		}()
		return reconcile(t, w.h, c, b)
	}
	var last error
	var passes int
	g.Eventually(func() int {
		if passes%2 == 1 {
			pass(true)
		} else {
			last = pass(false)
		}
		passes++
		return entriesOf(t, b)
	}, 10*time.Second, 50*time.Millisecond).Should(BeZero(),
		"admission forbade the update on every pass that did not panic, yet the SpiffeEntry of the old spec is kept; last pass: %v", last)
	g.Expect(panicked.Load()).To(BeNumerically(">=", 1), "no pass panicked")
	rf := failureConditions(b)[v1alpha1.ConditionRenderFailure]
	g.Expect(rf).To(Equal(v1alpha1.ReasonManagedOutputApplyFailed), "the refusal is never reported")
}

// panickyPoolReads is a client whose reads of Deployments panic while
// fault is set.
type panickyPoolReads struct {
	client.Client
	fault    *atomic.Bool
	panicked *atomic.Int32
}

// Get panics for a Deployment while the fault is set.
func (c *panickyPoolReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*appsv1.Deployment); ok && c.fault.Load() {
		c.panicked.Add(1)
		panic("injected fault reading the pool")
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
