package controller_test

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

// A Controller runs the reconcile lifecycle around a Handler; register it
// with a manager, watching the children the handler writes. manager.Run
// hands the Config and Metrics to an operator's Setup.
func ExampleSetupWithManager() {
	setup := func(mgr ctrl.Manager, cfg config.Config, metrics *controller.Metrics) error {
		c := controller.New("widget", mgr.GetClient(), &widget.Handler{}, controller.Options{
			Config:   cfg,
			Recorder: mgr.GetEventRecorder("widget"),
			Metrics:  metrics,
		})
		return controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} },
			func(b *builder.Builder) *builder.Builder { return b.Owns(&corev1.ConfigMap{}) })
	}
	_ = setup
}
