package widget

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
)

// The rights the Controller needs on its kind (finalizers, status), on the
// children the handler writes, and for its events; leader election needs
// leases besides (config/rbac of any of the operators).
//
// +kubebuilder:rbac:groups=test.trustplane.dev,resources=widgets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=test.trustplane.dev,resources=widgets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=test.trustplane.dev,resources=widgets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The metrics endpoint's guard (common/metricsauth) reviews each scraper's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// NewScheme returns the built-in kinds and Widget.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, widgetv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Setup registers the widget controller with mgr: the whole wiring an
// operator on common needs besides its Handler.
func Setup(mgr ctrl.Manager, cfg config.Config, metrics *controller.Metrics) error {
	c := controller.New("widget", mgr.GetClient(), &Handler{}, controller.Options{
		Config:    cfg,
		Recorder:  mgr.GetEventRecorder("widget"),
		Metrics:   metrics,
		APIReader: mgr.GetAPIReader(),
	})
	// Owning ConfigMaps repairs a child deleted or edited by hand at once.
	return controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} },
		func(b *builder.Builder) *builder.Builder { return b.Owns(&corev1.ConfigMap{}) })
}
