package controller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	crhandler "sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/class"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spiffeentry"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spiffefederation"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	"github.com/trustplane/trustplane/spiffe-operator/internal/services"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// +kubebuilder:rbac:groups=spiffe.trustplane.dev,resources=spifferegistrations;spiffeentries;spiffefederations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=spiffe.trustplane.dev,resources=spifferegistrations/status;spiffeentries/status;spiffefederations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=spiffe.trustplane.dev,resources=spifferegistrations/finalizers;spiffeentries/finalizers;spiffefederations/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The metrics endpoint's guard (common/metricsauth) reviews each scraper's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Controller names, used in logs, events and metrics.
const (
	RegistrationControllerName = "spifferegistration"
	EntryControllerName        = "spiffeentry"
	FederationControllerName   = "spiffefederation"
)

// CacheOptions returns the cache options that keep workloads, namespaces
// and pods trimmed to what the handlers read (no pod templates or pod specs
// in memory).
func CacheOptions() cache.Options {
	by := map[client.Object]cache.ByObject{
		&corev1.Namespace{}: {Transform: workload.Transform},
		&corev1.Pod{}:       {Transform: pods.Transform},
		&corev1.Node{}:      {Transform: nodes.Transform},
		&corev1.Service{}:   {Transform: services.Transform},
	}
	for _, obj := range workload.Objects() {
		by[obj] = cache.ByObject{Transform: workload.Transform}
	}
	return cache.Options{ByObject: by, DefaultTransform: cache.TransformStripManagedFields()}
}

// Options configure Setup.
type Options struct {
	// Config holds the framework settings.
	Config config.Config
	// Syncer writes entries to SPIRE; build it with the Notifier's Notify.
	Syncer *entrysync.Syncer
	// Notifier delivers the Syncer's notifications.
	Notifier *Notifier
	// TrustDomain is the SPIRE server's trust domain; empty skips the check.
	TrustDomain string
	// EntryMetrics is the gauge of entries by object and state.
	EntryMetrics *entrysync.Metrics
	// PassMetrics counts the SpiffeRegistration passes by kind; nil counts
	// nothing.
	PassMetrics *spifferegistration.PassMetrics
	// Metrics are the framework's reconcile metrics.
	Metrics *controller.Metrics
	// Dirty records which workloads changed, for incremental passes; the
	// Syncer's Notify must call its All for SpiffeRegistrations. Nil makes
	// every pass a full one.
	Dirty *spifferegistration.Dirty
	// ClusterName is the {clusterName} of parent ID templates.
	ClusterName string
	// Class says which objects this instance takes.
	Class class.Filter
	// DryRun is true when the Syncer and Federation write nothing.
	DryRun bool
	// Federation reads and writes SPIRE's federation relationships.
	Federation spire.FederationAPI
	// FirstPasses, when set, learns of every pass of the SpiffeRegistration
	// and SpiffeEntry controllers and tracks the objects of this class.
	FirstPasses *controller.FirstPasses
}

// Setup registers the SpiffeRegistration and SpiffeEntry controllers with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	cached := mgr.GetClient()
	regHandler := &spifferegistration.Handler{
		Reader: cached, Lister: workload.CacheLister{Cache: mgr.GetCache()}, Syncer: o.Syncer, TrustDomain: o.TrustDomain,
		Metrics: o.EntryMetrics, Dirty: o.Dirty, ClusterName: o.ClusterName, Nodes: nodes.CacheGetter(cached), AllNodes: nodes.CacheLister(cached), Class: o.Class,
		DryRun: o.DryRun, Passes: o.PassMetrics, Notify: o.Notifier.Notify,
		Pods: &pods.Source{Cache: mgr.GetCache()},
		ServiceNames: func(ctx context.Context, namespace string, podLabels map[string]string) ([]string, error) {
			return services.DNSNames(ctx, cached, namespace, podLabels)
		},
	}
	regCtrl := controller.New(RegistrationControllerName, mgr.GetClient(), regHandler, controller.Options{
		Config: o.Config, Recorder: mgr.GetEventRecorder(RegistrationControllerName), Metrics: o.Metrics, FirstPasses: o.FirstPasses,
	})
	events := &policyEvents{reader: mgr.GetClient(), dirty: o.Dirty, notifier: o.Notifier, class: o.Class}
	workloadChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return workload.Changed(e.ObjectOld, e.ObjectNew) }}
	err := controller.SetupWithManager(mgr, regCtrl, func() *v1alpha1.SpiffeRegistration { return &v1alpha1.SpiffeRegistration{} },
		func(b *builder.Builder) *builder.Builder {
			for kind, obj := range workload.Objects() {
				b = b.Watches(obj, events.forWorkloads(kind), builder.WithPredicates(workloadChanged))
			}
			return b.Watches(&corev1.Namespace{}, events.forNamespaces(), builder.WithPredicates(controller.LabelsOrDeletionChanged())).
				Watches(&corev1.Pod{}, events.forPods(), builder.WithPredicates(podPlacementChanged())).
				Watches(&corev1.Node{}, events.forNodeBound(), builder.WithPredicates(nodeCreatedOrDeleted())).
				Watches(&v1alpha1.SpiffeRegistration{}, events.forFallbacks()).
				Watches(&corev1.Service{}, events.forServices(), builder.WithPredicates(serviceSelectorChanged())).
				Watches(&v1alpha1.SpiffeFederation{}, events.forFederations()).
				WatchesRawSource(o.Notifier.source(spifferegistration.Kind)).
				WithEventFilter(ignoreOwnStatusUpdates())
		}, builder.WithPredicates(o.Class.Predicate()))
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", RegistrationControllerName, err)
	}

	if o.FirstPasses != nil {
		o.FirstPasses.Track(RegistrationControllerName, controller.KeysOf(cached,
			func() client.ObjectList { return &v1alpha1.SpiffeRegistrationList{} }, o.Class.TakesObject))
		o.FirstPasses.Track(EntryControllerName, controller.KeysOf(cached,
			func() client.ObjectList { return &v1alpha1.SpiffeEntryList{} }, o.Class.TakesObject))
	}

	if err := watchPods(mgr, o.Syncer); err != nil {
		return err
	}

	entryHandler := &spiffeentry.Handler{DryRun: o.DryRun, Syncer: o.Syncer, TrustDomain: o.TrustDomain, Metrics: o.EntryMetrics}
	entryCtrl := controller.New(EntryControllerName, mgr.GetClient(), entryHandler, controller.Options{
		Config: o.Config, Recorder: mgr.GetEventRecorder(EntryControllerName), Metrics: o.Metrics, FirstPasses: o.FirstPasses,
	})
	err = controller.SetupWithManager(mgr, entryCtrl, func() *v1alpha1.SpiffeEntry { return &v1alpha1.SpiffeEntry{} },
		func(b *builder.Builder) *builder.Builder {
			return b.WatchesRawSource(o.Notifier.source(spiffeentry.Kind)).WithEventFilter(ignoreOwnStatusUpdates())
		}, builder.WithPredicates(o.Class.Predicate()))
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", EntryControllerName, err)
	}
	return setupFederation(mgr, o)
}

// setupFederation registers the SpiffeFederation controller. A change of
// one object (its deletion above all) reconciles the others of its trust
// domain, which may be waiting for it.
func setupFederation(mgr ctrl.Manager, o Options) error {
	h := &spiffefederation.Handler{
		Reader: mgr.GetClient(), API: o.Federation, TrustDomain: o.TrustDomain, Class: o.Class, DryRun: o.DryRun,
		ClaimDelay: o.Config.RequeueAfterOnError,
	}
	c := controller.New(FederationControllerName, mgr.GetClient(), h, controller.Options{
		Config: o.Config, Recorder: mgr.GetEventRecorder(FederationControllerName), Metrics: o.Metrics,
	})
	reader := mgr.GetClient()
	sameTrustDomain := crhandler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		f, ok := obj.(*v1alpha1.SpiffeFederation)
		if !ok {
			return nil
		}
		var list v1alpha1.SpiffeFederationList
		if err := reader.List(ctx, &list); err != nil {
			logf.FromContext(ctx).Error(err, "listing SpiffeFederations for an event; an object waiting for this trust domain is taken up at its next resync",
				"trustDomain", f.Spec.TrustDomain)
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			other := &list.Items[i]
			// Only objects of this instance's class: the others' events
			// must not make it reconcile them.
			if other.UID != f.UID && other.Spec.TrustDomain == f.Spec.TrustDomain && o.Class.Takes(other.Spec.ClassName) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(other)})
			}
		}
		return out
	})
	err := controller.SetupWithManager(mgr, c, func() *v1alpha1.SpiffeFederation { return &v1alpha1.SpiffeFederation{} },
		func(b *builder.Builder) *builder.Builder {
			return b.Watches(&v1alpha1.SpiffeFederation{}, sameTrustDomain).WithEventFilter(ignoreFederationStatusUpdates())
		}, builder.WithPredicates(o.Class.Predicate()))
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", FederationControllerName, err)
	}
	return nil
}

// IndexPods registers the pod index that pods.Source on the cache reads
// (the Syncer's Options.Pods, the handler's Pods); call it before the
// manager starts.
func IndexPods(ctx context.Context, mgr ctrl.Manager) error {
	return pods.Index(ctx, mgr.GetCache())
}

// watchPods tells the Syncer when a pod may no longer need an entry it
// keeps: the pod is deleted, relabelled or has finished.
func watchPods(mgr ctrl.Manager, s *entrysync.Syncer) error {
	inf, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, okO := oldObj.(*pods.Object)
			n, okN := newObj.(*pods.Object)
			if okO && okN && (!o.LabelSet.Equal(n.LabelSet) || pods.Running(o) != pods.Running(n)) {
				s.PodsChanged(n.Namespace)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*pods.Object); ok {
				s.PodsChanged(p.Namespace)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	return nil
}

// podPlacementChanged passes the pod events that can change which pods of a
// workload run, on which nodes, and what a policy of pods renders for
// them: a pod created, bound to a node, relabelled, annotated, orphaned or
// adopted by another controller ({ownerKind} and {ownerName}), finished or
// deleted.
func podPlacementChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*pods.Object)
			n, okN := e.ObjectNew.(*pods.Object)
			if !okO || !okN {
				return true
			}
			oKind, oName := pods.Owner(o)
			nKind, nName := pods.Owner(n)
			return o.NodeName != n.NodeName || !o.LabelSet.Equal(n.LabelSet) ||
				!maps.Equal(o.Annotations, n.Annotations) || pods.Running(o) != pods.Running(n) ||
				oKind != nKind || oName != nName
		},
	}
}

// serviceSelectorChanged passes Service creations, deletions and changes
// of the selector, what autoPopulateDNSNames reads.
func serviceSelectorChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := e.ObjectOld.(*corev1.Service)
		n, okN := e.ObjectNew.(*corev1.Service)
		return !okO || !okN || !maps.Equal(o.Spec.Selector, n.Spec.Selector) ||
			(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
	}}
}

// ignoreFederationStatusUpdates drops the SpiffeFederation update events
// that change only the status (the controller's own writes) in the
// SpiffeFederation controller. The SpiffeRegistration controller sees them:
// a relationship made is news for the policies federating with it.
func ignoreFederationStatusUpdates() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if _, ok := e.ObjectNew.(*v1alpha1.SpiffeFederation); !ok {
			return true
		}
		return controller.SpecOrMetadataChanged(e.ObjectOld, e.ObjectNew)
	}}
}

// nodeCreatedOrDeleted passes Node creations and deletions: an update never
// changes the name or UID that parent IDs are rendered from.
func nodeCreatedOrDeleted() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
}

// ignoreOwnStatusUpdates drops update events of our own kinds that change
// only the status, or only add the framework's finalizer (the controller's
// own writes), which would otherwise cost a full pass each; events of other
// kinds pass.
func ignoreOwnStatusUpdates() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		switch e.ObjectNew.(type) {
		case *v1alpha1.SpiffeRegistration, *v1alpha1.SpiffeEntry:
		default:
			return true
		}
		return controller.SpecOrMetadataChanged(e.ObjectOld, e.ObjectNew)
	}}
}

// AliveOwners returns an entrysync.Options.Alive that reads every
// SpiffeRegistration and SpiffeEntry from r, so entries of objects removed
// while the operator was down are collected: the cache for Alive, the API
// server for AliveNow.
func AliveOwners(r client.Reader) func(ctx context.Context) (map[string]bool, error) {
	return func(ctx context.Context) (map[string]bool, error) {
		alive := map[string]bool{}
		var regs v1alpha1.SpiffeRegistrationList
		if err := r.List(ctx, &regs, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list SpiffeRegistrations: %w", err)
		}
		for i := range regs.Items {
			alive[entries.OwnerTag(regs.Items[i].UID)] = true
		}
		var ents v1alpha1.SpiffeEntryList
		if err := r.List(ctx, &ents, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list SpiffeEntries: %w", err)
		}
		for i := range ents.Items {
			alive[entries.OwnerTag(ents.Items[i].UID)] = true
		}
		return alive, nil
	}
}
