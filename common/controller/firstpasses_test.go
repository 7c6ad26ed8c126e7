package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

var _ = Describe("FirstPasses in a manager", func() {
	It("is done once every object present at the start had a pass: blocked, failing and deleted ones included", func(ctx context.Context) {
		ns := newNamespace(ctx)
		for _, w := range []*widgetv1.Widget{
			newWidget(ns, "ready", true),
			newWidget(ns, "blocked", false), // no environment label: the framework blocks it
			newWidget(ns, "failing", true),
			newWidget(ns, "slow", true),
			newWidget(ns, "doomed", true),
		} {
			if w.Name == "failing" {
				w.Spec.Fail = "terminal"
			}
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
		}

		mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		Expect(err).NotTo(HaveOccurred())
		release := make(chan struct{})
		h := &scriptedHandler{create: func(w *widgetv1.Widget) error {
			switch w.Name {
			case "slow":
				<-release
			case "failing":
				return errors.New("broken for good")
			}
			return nil
		}}
		first := controller.NewFirstPasses(0)
		inNamespace := func(o client.Object) bool { return o.GetNamespace() == ns }
		first.Track("widget-first-passes", controller.KeysOf(mgr.GetClient(), func() client.ObjectList { return &widgetv1.WidgetList{} }, inNamespace))
		Expect(mgr.Add(first)).To(Succeed())
		cfg := config.Default()
		cfg.RequeueAfterOnError = time.Hour
		c := controller.New("widget-first-passes", mgr.GetClient(), h, controller.Options{Config: cfg, FirstPasses: first})
		Expect(controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} }, nil)).To(Succeed())
		mctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		DeferCleanup(func() { close(release); cancel(); <-done })

		By("one object's first pass has not ended")
		Eventually(first.Waiting).Should(Equal(1), "the listed objects other than the slow one should have had their passes")
		Consistently(first.Done(), 500*time.Millisecond).ShouldNot(BeClosed())

		By("an object deleted meanwhile counts once its pass finds it gone")
		doomed := &widgetv1.Widget{}
		Expect(cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "doomed"}, doomed)).To(Succeed())
		Expect(cp.Client.Delete(ctx, doomed)).To(Succeed())

		By("the slow pass ends")
		release <- struct{}{}
		Eventually(first.Done()).Should(BeClosed())
		Expect(first.Waiting()).To(BeZero())

		By("objects created later are not waited for")
		Expect(cp.Client.Create(ctx, newWidget(ns, "later", true))).To(Succeed())
		Expect(first.Done()).To(BeClosed())
	})
})

// TestFirstPassesCountsPassesBeforeTheListAndIsDoneWithNothingListed: passes
// that end before Start lists count; a kind with no object is done at once;
// a list that fails fails Start; a nil FirstPasses ignores passes.
func TestFirstPassesCountsPassesBeforeTheListAndIsDoneWithNothingListed(t *testing.T) {
	ctx := context.Background()
	keys := func(names ...string) controller.ListKeys {
		return func(context.Context) ([]types.NamespacedName, error) {
			var out []types.NamespacedName
			for _, n := range names {
				out = append(out, types.NamespacedName{Namespace: "ns", Name: n})
			}
			return out, nil
		}
	}
	f := controller.NewFirstPasses(0)
	f.Track("a", keys("x", "y"))
	f.Track("b", keys("x"))
	f.Passed("a", types.NamespacedName{Namespace: "ns", Name: "x"})
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.Waiting(); got != 2 {
		t.Fatalf("waiting for %d passes, want 2 (a/y and b/x: a pass of x by a does not count for b)", got)
	}
	f.Passed("a", types.NamespacedName{Namespace: "ns", Name: "y"})
	f.Passed("a", types.NamespacedName{Namespace: "ns", Name: "unlisted"})
	select {
	case <-f.Done():
		t.Fatal("done while b/x has had no pass")
	default:
	}
	f.Passed("b", types.NamespacedName{Namespace: "ns", Name: "x"})
	select {
	case <-f.Done():
	default:
		t.Fatal("not done after every listed object had its pass")
	}

	empty := controller.NewFirstPasses(0)
	empty.Track("a", keys())
	if err := empty.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-empty.Done():
	default:
		t.Error("not done with nothing listed")
	}

	failing := controller.NewFirstPasses(0)
	failing.Track("a", func(context.Context) ([]types.NamespacedName, error) { return nil, errors.New("no cache") })
	if err := failing.Start(ctx); err == nil {
		t.Error("Start succeeded although the list failed")
	}

	var none *controller.FirstPasses
	none.Passed("a", types.NamespacedName{Name: "x"}) // must not panic
}

// TestFirstPassesIsDoneWhenItsMaximumWaitRunsOut: an object whose pass
// never comes (events ahead of it in the queue, without end) holds Done
// only until the maximum wait runs out.
func TestFirstPassesIsDoneWhenItsMaximumWaitRunsOut(t *testing.T) {
	f := controller.NewFirstPasses(50 * time.Millisecond)
	f.Track("a", func(context.Context) ([]types.NamespacedName, error) {
		return []types.NamespacedName{{Namespace: "ns", Name: "starved"}}, nil
	})
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done 10s after a maximum wait of 50ms")
	}
	if f.Waiting() != 0 {
		t.Errorf("still waiting for %d passes once done", f.Waiting())
	}
	f.Passed("a", types.NamespacedName{Namespace: "ns", Name: "starved"}) // a late pass changes nothing
}
