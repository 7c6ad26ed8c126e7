package controller_test

// Covers (1) the environment move of CreateOrUpdate: an owner moved to
// another environment whose spec drops a child in the same edit; (2) the
// status write that condition.Set now protects: the other setter of the
// framework, status.Common.SetCondition; (3) condition.ValidType against
// what the API server really accepts (false positives and negatives).

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/labels"
)

var _ = Describe("an owner moved to another environment that drops a child in the same edit", func() {
	It("does not leave the dropped child of the earlier environment behind while reporting Ready", func(ctx context.Context) {
		ns := newNamespace(ctx)
		c := controller.New("widget-env-move-drop", cp.Client, &widget.Handler{}, controller.Options{Config: config.Default()})
		w := newWidget(ns, "mover", true, "keep", "drop")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())

		get(ctx, w)
		w.Labels[labels.Environment] = "prod"
		w.Spec.Children = []string{"keep"}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		for i := 0; i < 2; i++ {
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())

		dropped := &corev1.ConfigMap{}
		err = cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "drop"}, dropped)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(),
			"the owner is Ready in prod with children [keep], but its withdrawn child %q (environment %q, owner-uid %q) is still there",
			dropped.Name, dropped.Labels[labels.Environment], dropped.Labels[labels.OwnerUID])
	})
})

var _ = Describe("a condition set through status.Common.SetCondition", func() {
	It("still lets the status (and Ready) land when its type is one the API server refuses", func(ctx context.Context) {
		ns := newNamespace(ctx)
		h := &scriptedHandler{create: func(w *widgetv1.Widget) error {
			// status.Common's own setter, which its doc offers beside condition.Set.
			w.Status.SetCondition(metav1.Condition{Type: "Greeting Sent", Status: metav1.ConditionTrue, Reason: "Written", Message: "sent"})
			return nil
		}}
		c := controller.New("widget-setcondition", cp.Client, h, controller.Options{Config: config.Default()})
		w := newWidget(ns, "setcond", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred(), "the status write was refused")
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue(), "Ready never landed")
	})
})

var _ = Describe("condition.ValidType against the API server", func() {
	It("accepts exactly the condition types the API server accepts", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "types", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		types := []string{
			"Ready", "example.com/Ready", "a", "A-b_c.d", strings.Repeat("a", 316), strings.Repeat("a", 317),
			strings.Repeat("x", 253) + "/" + strings.Repeat("y", 62), strings.Repeat("x", 250) + "/" + strings.Repeat("y", 66),
			"Example.com/Ready", "example.com/", "/Ready", "a/b/c", "example..com/Ready", "-a", "a-", "ready.",
			"Ready\n", "Grüße", "a b", "example.com/Ready.v2", "1", "_a", "a_",
		}
		for _, t := range types {
			get(ctx, w)
			w.Status.Conditions = []metav1.Condition{{Type: t, Status: metav1.ConditionTrue, Reason: "R",
				LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}}
			err := cp.Client.Status().Update(ctx, w)
			Expect(err == nil || apierrors.IsInvalid(err)).To(BeTrue(), "%q: %v", t, err)
			Expect(condition.ValidType(t)).To(Equal(err == nil), "type %q (%d chars): API server error %v", t, len(t), err)
		}
	})
})

// Covers condition.Repair (the Controller's repair of every condition
// before the status write, "however it was set", an append named): a
// condition appended without a lastTransitionTime, which the CRD's schema
// requires.
var _ = Describe("a condition appended without a transition time", func() {
	It("still lets the status (and Ready) land", func(ctx context.Context) {
		ns := newNamespace(ctx)
		h := &scriptedHandler{create: func(w *widgetv1.Widget) error {
			w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: "GreetingSent", Status: metav1.ConditionTrue, Reason: "Written"})
			return nil
		}}
		c := controller.New("widget-append", cp.Client, h, controller.Options{Config: config.Default()})
		w := newWidget(ns, "appended", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred(), "the status write was refused")
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue(), "Ready never landed")
	})
})
