package widget_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/labels"
)

func TestWidgetOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "example widget operator")
}

var _ = Describe("the example operator", Ordered, func() {
	var c client.Client

	BeforeAll(func() {
		cp, err := testapi.StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		c = cp.Client

		mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		Expect(err).NotTo(HaveOccurred())
		metrics, err := controller.NewMetrics(prometheus.NewRegistry())
		Expect(err).NotTo(HaveOccurred())
		Expect(widget.Setup(mgr, config.Default(), metrics)).To(Succeed())
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		go func() {
			defer GinkgoRecover()
			Expect(mgr.Start(ctx)).To(Succeed())
		}()
	})

	It("creates children, repairs one deleted by hand, removes one dropped from the spec, and cleans up on delete", func(ctx context.Context) {
		w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default",
			Labels: map[string]string{labels.Environment: "dev"}},
			Spec: widgetv1.WidgetSpec{Children: []string{"one", "two"}, Data: map[string]string{"greeting": "hello"}}}
		Expect(c.Create(ctx, w)).To(Succeed())
		cm := func(name string) error {
			return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &corev1.ConfigMap{})
		}
		Eventually(func() bool {
			got := &widgetv1.Widget{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(w), got)).To(Succeed())
			return condition.IsReady(got)
		}, 20*time.Second).Should(BeTrue())
		Expect(cm("one")).To(Succeed())
		Expect(cm("two")).To(Succeed())

		Expect(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"}})).To(Succeed())
		Eventually(func() error { return cm("one") }, 10*time.Second).Should(Succeed(), "a child deleted by hand is repaired from the watch")

		Expect(c.Get(ctx, client.ObjectKeyFromObject(w), w)).To(Succeed())
		w.Spec.Children = []string{"one"}
		Expect(c.Update(ctx, w)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(cm("two")) }, 10*time.Second).Should(BeTrue())

		Expect(c.Delete(ctx, w)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(cm("one")) }, 10*time.Second).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{}))
		}, 10*time.Second).Should(BeTrue())
	})
})
