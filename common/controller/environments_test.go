package controller_test

import (
	"context"

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

// instanceOf returns the widget Controller of an instance that reconciles
// only env, its default environment.
func instanceOf(name, env string) *controller.Controller[*widgetv1.Widget] {
	cfg := config.Default()
	cfg.DefaultEnvironment = env
	cfg.Environments = []string{env}
	return controller.New(name, cp.Client, &widget.Handler{}, controller.Options{Config: cfg, APIReader: cp.Client})
}

// Guarantee 1: environments scope who reconciles. Two instances of one
// operator, each given its environment with --environments, share a
// cluster; each leaves the other's objects alone, an object moved between
// them changes hands with its children, and an unlabelled object goes to
// the first instance that labels it with its default environment.
var _ = Describe("Two instances of different environments", func() {
	It("each reconcile, move and delete only the objects of their own environment", func(ctx context.Context) {
		ns := newNamespace(ctx)
		prod, staging := instanceOf("widget-prod", "prod"), instanceOf("widget-staging", "staging")
		w := newWidget(ns, "envs", false, "envs-a")
		w.Labels = map[string]string{labels.Environment: "prod"}
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "envs-a", Namespace: ns}}

		By("the prod instance reconciling it, the staging instance writing nothing")
		_, err := reconcileOnce(ctx, prod, w)
		Expect(err).NotTo(HaveOccurred())
		get(ctx, w)
		get(ctx, child)
		rv, childRV := w.ResourceVersion, child.ResourceVersion
		_, err = reconcileOnce(ctx, staging, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ctx, w).GetResourceVersion()).To(Equal(rv), "the staging instance wrote the prod widget")
		Expect(get(ctx, child).GetResourceVersion()).To(Equal(childRV), "the staging instance wrote the prod widget's child")

		By("the widget moved to staging: prod leaves it, staging takes it with its child")
		w.Labels[labels.Environment] = "staging"
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		rv = w.ResourceVersion
		_, err = reconcileOnce(ctx, prod, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ctx, w).GetResourceVersion()).To(Equal(rv), "the prod instance wrote a widget of staging")
		_, err = reconcileOnce(ctx, staging, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		Expect(get(ctx, child).GetLabels()).To(HaveKeyWithValue(labels.Environment, "staging"))

		By("the widget deleted: only the staging instance finalizes it")
		Expect(cp.Client.Delete(ctx, w)).To(Succeed())
		_, err = reconcileOnce(ctx, prod, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ctx, w).GetFinalizers()).To(ContainElement(labels.Finalizer), "the prod instance finalized a widget of staging")
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(child), child)).To(Succeed())
		_, err = reconcileOnce(ctx, staging, w)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool {
			return apierrors.IsNotFound(cp.Client.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{}))
		}).Should(BeTrue())
	})

	It("leave an unlabelled object to the first that labels it with its default environment", func(ctx context.Context) {
		ns := newNamespace(ctx)
		a, b := instanceOf("widget-a", "a"), instanceOf("widget-b", "b")
		w := newWidget(ns, "unlabelled", false, "unlabelled-a")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, a, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ctx, w).GetLabels()).To(HaveKeyWithValue(labels.Environment, "a"))
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled-a", Namespace: ns}}
		childRV := get(ctx, child).GetResourceVersion()
		rv := w.ResourceVersion
		for range 2 {
			for _, c := range []*controller.Controller[*widgetv1.Widget]{b, a} {
				_, err := reconcileOnce(ctx, c, w)
				Expect(err).NotTo(HaveOccurred())
			}
		}
		Expect(get(ctx, w).GetResourceVersion()).To(Equal(rv), "steady passes of both instances wrote the widget")
		Expect(get(ctx, child).GetResourceVersion()).To(Equal(childRV), "steady passes of both instances moved its child")
	})
})
