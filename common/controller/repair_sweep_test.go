package controller_test

// Covers (1) condition.Repair as the Controller runs it before every status
// write: a handler that sets a condition with status.Common.SetCondition
// (which Repair covers) must not make idle passes write (writeCounter);
// (2) the sweep's resourceVersion precondition (janitor Cleanup): a cache
// that lags behind the operator's own write of a stale child makes the
// delete conflict, and the pass must neither fail (Ready=False) nor leave
// the child. Limit: a child changed between every read and its delete (by
// someone who may edit it) is not swept; the pass fails and runs again.

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

var _ = Describe("idle passes of a handler that uses status.Common.SetCondition", func() {
	idle := func(ctx context.Context, name string, set func(w *widgetv1.Widget)) {
		ns := newNamespace(ctx)
		h := &scriptedHandler{create: func(w *widgetv1.Widget) error { set(w); return nil }}
		counter := &writeCounter{}
		c := controller.New("widget-"+name, counter.wrap(watchClient()), h, controller.Options{Config: config.Default()})
		w := newWidget(ns, name, true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		// One more pass (it may only reorder), then idle passes a second or
		// more apart, as resyncs are (the status compares to the second).
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		counter.n.Store(0)
		for range 2 {
			time.Sleep(1100 * time.Millisecond)
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(counter.n.Load()).To(BeZero(), "idle passes wrote the status again")
	}

	It("writes nothing when the condition's type is invalid", func(ctx context.Context) {
		idle(ctx, "bad-type", func(w *widgetv1.Widget) {
			w.Status.SetCondition(metav1.Condition{Type: "Greeting Sent", Status: metav1.ConditionTrue, Reason: "Written", Message: "sent"})
		})
	})

	It("writes nothing when the condition's status is invalid", func(ctx context.Context) {
		idle(ctx, "bad-status", func(w *widgetv1.Widget) {
			w.Status.SetCondition(metav1.Condition{Type: "Greeting", Status: "Yes", Reason: "Written", Message: "sent"})
		})
	})

	It("holds: writes nothing when only the condition's reason is invalid", func(ctx context.Context) {
		idle(ctx, "bad-reason", func(w *widgetv1.Widget) {
			w.Status.SetCondition(metav1.Condition{Type: "Greeting", Status: metav1.ConditionTrue, Reason: "not a reason", Message: "sent"})
		})
	})
})

var _ = Describe("the sweep's resourceVersion precondition", func() {
	// staleLists returns a client that serves ConfigMap lists from snapshot
	// (a cache that has not seen later writes) and all else directly.
	staleLists := func(snapshot *corev1.ConfigMapList) client.Client {
		return interceptor.NewClient(watchClient(), interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if l, ok := list.(*corev1.ConfigMapList); ok && snapshot != nil {
					if err := c.List(ctx, l, opts...); err != nil {
						return err
					}
					// Same selection, versions as the snapshot had them.
					for i := range l.Items {
						for _, s := range snapshot.Items {
							if s.UID == l.Items[i].UID {
								l.Items[i] = *s.DeepCopy()
							}
						}
					}
					return nil
				}
				return c.List(ctx, list, opts...)
			},
		})
	}

	It("does not fail the pass (Ready=False) when the cache lags behind the operator's own last write of the stale child", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "lag", true, "a", "b")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		direct := controller.New("widget-lag", watchClient(), &widget.Handler{}, controller.Options{Config: config.Default()})
		_, err := reconcileOnce(ctx, direct, w)
		Expect(err).NotTo(HaveOccurred())
		snapshot := &corev1.ConfigMapList{}
		Expect(cp.Client.List(ctx, snapshot, client.InNamespace(ns))).To(Succeed())

		// The operator's own pass rewrites both children (new data).
		get(ctx, w)
		w.Spec.Data = map[string]string{"k": "v2"}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		_, err = reconcileOnce(ctx, direct, w)
		Expect(err).NotTo(HaveOccurred())

		// The next edit drops b; the cache has not seen the last write yet.
		get(ctx, w)
		w.Spec.Children = []string{"a"}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		lagging := controller.New("widget-lag2", staleLists(snapshot), &widget.Handler{}, controller.Options{Config: config.Default()})
		_, err = reconcileOnce(ctx, lagging, w)
		got := get(ctx, w).(*widgetv1.Widget)
		Expect(cond(got, condition.TypeReady).Status).To(Equal(metav1.ConditionTrue),
			"a conflict of the operator's own cache lag was reported as a failed pass: %v; Ready=%+v", err, cond(got, condition.TypeReady))
	})
})
