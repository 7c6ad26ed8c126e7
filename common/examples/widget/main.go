package widget

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/internal/testapi"
)

// Setup registers the widget controller with mgr: the whole wiring an
// operator on common needs besides its Handler.
func Setup(mgr ctrl.Manager, cfg config.Config, reg prometheus.Registerer) error {
	metrics, err := controller.NewMetrics(reg)
	if err != nil {
		return err
	}
	c := controller.New("widget", mgr.GetClient(), &Handler{}, controller.Options{
		Config:   cfg,
		Recorder: mgr.GetEventRecorder("widget"),
		Metrics:  metrics,
	})
	// Owning ConfigMaps repairs a child deleted or edited by hand at once.
	return controller.SetupWithManager(mgr, c, func() *testapi.Widget { return &testapi.Widget{} },
		func(b *builder.Builder) *builder.Builder { return b.Owns(&corev1.ConfigMap{}) })
}
