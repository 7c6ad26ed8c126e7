package operator

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/viper"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/class"
	opcontroller "github.com/trustplane/trustplane/spiffe-operator/internal/controller"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spiffeentry"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// Scheme returns a scheme with the built-in kinds the operator uses
// (namespaces, events, workloads, leases) and this API. Registering only
// these, rather than every built-in group, keeps the process smaller.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme, v1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

// Operator is an assembled, not yet started, spiffe-operator.
type Operator struct {
	// Manager runs the controllers.
	Manager ctrl.Manager
	// Spire is the SPIRE Entry API client (its Calls count RPCs).
	Spire *spire.Client
	// Federation is the SPIRE TrustDomain API client (its Reads and Writes
	// count RPCs).
	Federation *spire.FederationClient
	// Syncer is the entry syncer.
	Syncer *entrysync.Syncer
	// EntryIDPrefix is the prefix of the entries this operator owns: the
	// configured one, or the one derived from the cluster.
	EntryIDPrefix string

	closer io.Closer
}

// Name is the operator's name: of its process, logger and leader election
// lease (one per class: manager.InstanceName).
const Name = "spiffe-operator"

// Process is the spiffe-operator process for manager.Main.
func Process() manager.Operator {
	defaults := managerDefaults()
	return manager.Operator{
		Name:     Name,
		Instance: func(v *viper.Viper) string { return v.GetString(KeyClassName) },
		Defaults: &defaults,
		AddFlags: addFlags,
		Scheme:   Scheme,
		Configure: func(_ *manager.Process, o *ctrl.Options) error {
			o.Cache = opcontroller.CacheOptions()
			return nil
		},
		Setup: func(ctx context.Context, p *manager.Process) (func(), error) {
			o, err := Load(p.Viper)
			if err != nil {
				return nil, err
			}
			if p.LeaseGuard != nil {
				o.WriteGuard = p.LeaseGuard.Deadline
			}
			op, err := assemble(ctx, p.Manager, o, p.Registry, p.Metrics)
			if err != nil {
				return nil, err
			}
			ctrl.Log.WithName(Name).Info("assembled", "trustDomain", o.TrustDomain, "entryIDPrefix", op.EntryIDPrefix)
			return func() { _ = op.closer.Close() }, nil
		},
	}
}

// New connects to SPIRE and builds the manager. reg receives the metrics
// (the controller-runtime registry in a process, a fresh one in tests).
func New(ctx context.Context, cfg *rest.Config, o Options, reg prometheus.Registerer) (*Operator, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgrOpts := o.Manager.ManagerOptions(manager.InstanceName(Name, o.ClassName))
	mgrOpts.Scheme = scheme
	mgrOpts.Cache = opcontroller.CacheOptions()
	mgr, err := ctrl.NewManager(o.Manager.RestConfig(cfg), mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := manager.AddHealthChecks(mgr); err != nil {
		return nil, err
	}
	ctrlMetrics, err := controller.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return assemble(ctx, mgr, o, reg, ctrlMetrics)
}

// assemble connects to SPIRE and adds the controllers, the entry syncer and
// the orphan collection to mgr.
func assemble(ctx context.Context, mgr ctrl.Manager, o Options, reg prometheus.Registerer, ctrlMetrics *controller.Metrics) (*Operator, error) {
	rpcMetrics, err := spire.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	passMetrics, err := spifferegistration.NewPassMetrics(reg)
	if err != nil {
		return nil, err
	}
	entryMetrics, err := entrysync.NewMetrics(reg)
	if err != nil {
		return nil, err
	}

	prefix := o.EntryIDPrefix
	validate := entries.IDScheme.ValidateChosen
	if prefix == "" {
		if prefix, err = clusterPrefix(ctx, mgr.GetAPIReader()); err != nil {
			return nil, err
		}
		validate = entries.IDScheme.Validate
	}
	if err := validate(entries.IDScheme{Prefix: prefix}); err != nil {
		return nil, fmt.Errorf("--%s: %w", KeyEntryIDPrefix, err)
	}

	conn, closer, err := spireconn.Dial(ctx, o.Connect)
	if err != nil {
		return nil, err
	}
	api := spire.NewClient(conn, spire.Options{
		PageSize: o.PageSize, Concurrency: o.WriteConcurrency, Timeout: o.RPCTimeout, Metrics: rpcMetrics,
		WriteGuard: o.WriteGuard,
	})
	notifier := opcontroller.NewNotifier(spifferegistration.Kind, spiffeentry.Kind)
	dirty := spifferegistration.NewDirty()
	syncOpts := entrysync.Options{
		IDs:              entries.IDScheme{Prefix: prefix},
		ResyncInterval:   o.Config.RequeueAfter,
		HoldUntilSettled: true,
		Notify: func(owner entrysync.Owner) {
			// A won or lost entry can concern any workload: full pass.
			if owner.Kind == spifferegistration.Kind {
				dirty.All(owner.Name)
			}
			notifier.Notify(owner)
		},
		Recheck: func(owner entrysync.Owner) {
			// Pods changed where the owner keeps entries for them: an
			// incremental pass judges those entries again.
			if owner.Kind == spifferegistration.Kind {
				dirty.Kept(owner.Name)
			}
			notifier.Notify(owner)
		},
	}
	if err := opcontroller.IndexPods(ctx, mgr); err != nil {
		_ = closer.Close()
		return nil, err
	}
	syncOpts.Pods = pods.Lister(pods.Source{Cache: mgr.GetCache()})
	if o.CollectOrphans {
		syncOpts.Alive = opcontroller.AliveOwners(mgr.GetCache())
		syncOpts.AliveNow = opcontroller.AliveOwners(mgr.GetAPIReader())
	}
	var entryAPI spire.EntryAPI = api
	federation := spire.NewFederationClient(conn, spire.Options{Timeout: o.RPCTimeout, Metrics: rpcMetrics, WriteGuard: o.WriteGuard})
	var federationAPI spire.FederationAPI = federation
	if o.DryRun {
		entryAPI = spire.NewDryRun(api, ctrl.LoggerFrom(ctx).WithName("dry-run"), rpcMetrics)
		federationAPI = spire.NewFederationDryRun(federationAPI, ctrl.LoggerFrom(ctx).WithName("dry-run"), rpcMetrics)
	}
	syncer := entrysync.New(entryAPI, syncOpts)
	first := controller.NewFirstPasses(FirstPassesMaxWait)
	if err := mgr.Add(first); err != nil {
		_ = closer.Close()
		return nil, fmt.Errorf("add the tracking of first passes: %w", err)
	}
	if err := mgr.Add(settleAfterFirstPasses(first, syncer, o.CollectOrphans, o.Config.RequeueAfterOnError, o.Config.MaxBackoff)); err != nil {
		_ = closer.Close()
		return nil, fmt.Errorf("add orphan collection: %w", err)
	}
	err = opcontroller.Setup(mgr, opcontroller.Options{
		FirstPasses: first,
		Config:      o.Config, Syncer: syncer, Notifier: notifier, TrustDomain: o.TrustDomain,
		EntryMetrics: entryMetrics, PassMetrics: passMetrics, Metrics: ctrlMetrics, Dirty: dirty, ClusterName: o.ClusterName,
		Class: class.Filter{Name: o.ClassName, Classless: o.WatchClassless}, DryRun: o.DryRun, Federation: federationAPI,
	})
	if err != nil {
		_ = closer.Close()
		return nil, err
	}
	return &Operator{Manager: mgr, Spire: api, Federation: federation, Syncer: syncer, EntryIDPrefix: prefix, closer: closer}, nil
}

// FirstPassesMaxWait is the longest a deletion after a start waits for the
// first passes of the objects present at the start (see
// entrysync.Options.HoldUntilSettled): a stream of events, which go first
// in the queue, can hold those passes back.
const FirstPassesMaxWait = 5 * time.Minute

// settleAfterFirstPasses returns a runnable (of the leader) that, once every
// object that existed at the start has had its first pass, lets the Syncer
// delete (Settle), and then, when collect is set, collects the orphans
// under every parent ID once, retrying with backoff from first to most
// while SPIRE cannot be read.
func settleAfterFirstPasses(passes *controller.FirstPasses, s *entrysync.Syncer, collect bool, first, most time.Duration) crmanager.Runnable {
	return crmanager.RunnableFunc(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-passes.Done():
		}
		s.Settle()
		if !collect {
			return nil
		}
		log := ctrl.LoggerFrom(ctx).WithName("orphans")
		for delay := first; ; delay = min(2*delay, most) {
			n, err := s.CollectEverywhere(ctx)
			if err == nil {
				log.V(1).Info("collected orphans under every parent", "entries", n)
				return nil
			}
			log.Error(err, "collecting orphans under every parent; retrying", "in", delay)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		}
	})
}

// clusterPrefix derives the default entry ID prefix from the UID of the
// kube-system namespace, which lives as long as the cluster.
func clusterPrefix(ctx context.Context, r client.Reader) (string, error) {
	var ns corev1.Namespace
	if err := r.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return "", fmt.Errorf("derive the entry ID prefix from the %s namespace's UID (or set --%s): %w",
			metav1.NamespaceSystem, KeyEntryIDPrefix, err)
	}
	return entries.ClusterPrefix(ns.UID), nil
}

// Start runs the manager until ctx ends, then closes the SPIRE connection.
func (op *Operator) Start(ctx context.Context) error {
	defer func() { _ = op.closer.Close() }()
	return op.Manager.Start(ctx)
}
