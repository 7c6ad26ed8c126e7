package controller

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	crhandler "sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/trigger"
)

// Name is the controller's name in logs, events and metrics.
const Name = "trustbundle"

// DefaultPollInterval is how often SPIRE and the ConfigMap and Secret
// sources are polled unless configured otherwise.
const DefaultPollInterval = 5 * time.Second

// +kubebuilder:rbac:groups=bundle.trustplane.dev,resources=trustbundles,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=bundle.trustplane.dev,resources=trustbundles/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=bundle.trustplane.dev,resources=trustbundles/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=clustertrustbundles,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The metrics endpoint's guard (common/metricsauth) reviews each scraper's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options configure Setup.
type Options struct {
	// Config holds the framework settings.
	Config config.Config
	// Metrics records reconcile metrics; nil disables them.
	Metrics *controller.Metrics
	// Spire reads SPIRE bundles; nil when no SPIRE connection is configured.
	Spire spire.Reader
	// AllowSecretSources permits Secret sources.
	AllowSecretSources bool
	// AllowSecretTargets permits Secret targets and watches Secrets (those
	// labelled as targets, metadata only). Without it the operator needs
	// no rights on Secrets unless AllowSecretSources is set.
	AllowSecretTargets bool
	// ClusterTrustBundles permits ClusterTrustBundle targets and watches
	// the ClusterTrustBundles labelled as targets (the API server must
	// serve certificates.k8s.io/v1 ClusterTrustBundles).
	ClusterTrustBundles bool
	// SourceNamespaces are the only namespaces ConfigMap and Secret
	// sources are read from.
	SourceNamespaces []string
	// PollInterval is how often trigger polls SPIRE and the sources.
	PollInterval time.Duration
	// Workers bounds concurrent target writes of one TrustBundle.
	Workers int
}

// CacheOptions returns the manager's cache options: ConfigMaps and Secrets
// are cached only when they carry target.LabelTrustBundle (they are read as
// metadata only, so a Secret's data never enters the cache; their
// managedFields stay, target.InSync reads them), except that every
// ConfigMap of sourceNamespaces is cached (metadata only) so that the poller
// notices edits of ConfigMap sources without reading the API server; and
// Namespaces without their managedFields; with clusterTrustBundles, the
// ClusterTrustBundles labelled as targets (metadata only).
func CacheOptions(sourceNamespaces []string, clusterTrustBundles bool) (cache.Options, error) {
	req, err := labels.NewRequirement(target.LabelTrustBundle, selection.Exists, nil)
	if err != nil {
		return cache.Options{}, fmt.Errorf("target label selector: %w", err)
	}
	ours := labels.NewSelector().Add(*req)
	configMaps := cache.ByObject{Label: ours}
	if len(sourceNamespaces) > 0 {
		configMaps = cache.ByObject{Namespaces: map[string]cache.Config{cache.AllNamespaces: {LabelSelector: ours}}}
		for _, ns := range sourceNamespaces {
			configMaps.Namespaces[ns] = cache.Config{LabelSelector: labels.Everything()}
		}
	}
	byObject := map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: configMaps,
		&corev1.Secret{}:    {Label: ours},
		&corev1.Namespace{}: {Transform: cache.TransformStripManagedFields()},
	}
	if clusterTrustBundles {
		// Only then: the cache resolves every kind it is configured for at
		// start, and an API server may not serve ClusterTrustBundles.
		byObject[&certificatesv1.ClusterTrustBundle{}] = cache.ByObject{Label: ours}
	}
	return cache.Options{
		ByObject: byObject,
		// A read of a kind nothing watches fails instead of quietly starting
		// an informer for it: a typed ConfigMap read through the cache would
		// otherwise cache every ConfigMap of the cluster with its data.
		ReaderFailOnMissingInformer: true,
	}, nil
}

// Setup registers the TrustBundle controller and its poller with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	live := mgr.GetAPIReader()
	expectations := target.NewExpectations()
	sources := &source.Resolver{Reader: live, Metadata: mgr.GetClient(), Spire: opts.Spire,
		AllowSecrets: opts.AllowSecretSources, Namespaces: opts.SourceNamespaces}
	recorder := mgr.GetEventRecorder(Name)
	h := &trustbundle.Handler{
		Sources: sources,
		Objects: &target.Objects{Cache: mgr.GetClient(), Client: mgr.GetClient(), Live: live,
			Workers: opts.Workers, Expectations: expectations},
		Injector:      &target.Injector{Cache: mgr.GetClient(), Live: live, Client: mgr.GetClient()},
		Namespaces:    mgr.GetClient(),
		SecretTargets: opts.AllowSecretTargets,
		Recorder:      recorder,
	}
	if opts.ClusterTrustBundles {
		h.ClusterTrustBundles = &target.ClusterTrustBundles{Cache: mgr.GetClient(), Live: live, Client: mgr.GetClient()}
	}
	c := controller.New(Name, mgr.GetClient(), h, controller.Options{
		Config:   opts.Config,
		Recorder: recorder,
		Metrics:  opts.Metrics,
	})

	interval := opts.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	events := make(chan event.TypedGenericEvent[*v1alpha1.TrustBundle])
	if err := mgr.Add(&trigger.Poller{
		Client: mgr.GetClient(), Sources: sources, Spire: opts.Spire,
		Interval: interval, Events: events,
	}); err != nil {
		return fmt.Errorf("add trigger poller: %w", err)
	}

	newObject := func() *v1alpha1.TrustBundle { return &v1alpha1.TrustBundle{} }
	return controller.SetupWithManager(mgr, c, newObject, func(b *builder.Builder) *builder.Builder {
		b = b.WatchesMetadata(&corev1.Namespace{},
			crhandler.EnqueueRequestsFromMapFunc(allTrustBundles(mgr.GetClient())),
			builder.WithPredicates(controller.LabelsOrDeletionChanged()))
		b = b.WatchesMetadata(&corev1.ConfigMap{}, byTargetLabel(target.KindConfigMap, expectations))
		if opts.AllowSecretTargets {
			b = b.WatchesMetadata(&corev1.Secret{}, byTargetLabel(target.KindSecret, expectations))
		}
		if opts.ClusterTrustBundles {
			b = b.WatchesMetadata(&certificatesv1.ClusterTrustBundle{}, crhandler.EnqueueRequestsFromMapFunc(byLabel))
		}
		for _, gvk := range target.InjectionKinds() {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(gvk)
			b = b.Watches(m, crhandler.EnqueueRequestsFromMapFunc(byInjectAnnotation))
		}
		return b.WatchesRawSource(crsource.Channel(events, &crhandler.TypedEnqueueRequestForObject[*v1alpha1.TrustBundle]{}))
	})
}

// allTrustBundles requeues every TrustBundle: a namespace appeared, left or
// changed labels, which may change any bundle's selection.
func allTrustBundles(c client.Reader) crhandler.MapFunc {
	return func(ctx context.Context, ns client.Object) []reconcile.Request {
		var list v1alpha1.TrustBundleList
		if err := c.List(ctx, &list); err != nil {
			// The periodic resync reconciles every TrustBundle later.
			logf.FromContext(ctx).Error(err, "list TrustBundles to requeue for a namespace event", "namespace", ns.GetName())
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, tb := range list.Items {
			if tb.Spec.Target.ConfigMap != nil || tb.Spec.Target.Secret != nil {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: tb.Name}})
			}
		}
		return out
	}
}

// byTargetLabel requeues the TrustBundle a target belongs to, after telling
// the expectations that the cache has seen this version of the target.
func byTargetLabel(kind target.Kind, exp *target.Expectations) crhandler.EventHandler {
	return crhandler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		exp.Observe(kind, obj)
		name := obj.GetLabels()[target.LabelTrustBundle]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	})
}

// byLabel requeues the TrustBundle a cluster-scoped target's label names.
func byLabel(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[target.LabelTrustBundle]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// byInjectAnnotation requeues the TrustBundle an injection target names.
func byInjectAnnotation(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetAnnotations()[v1alpha1.InjectAnnotation]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}
