package setup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/manager"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/boundary"
	ibcontroller "github.com/trustplane/trustplane/identity-operator/internal/controller"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// Keys of the operator's own settings (flags; env vars upper-cased with
// underscores, e.g. TRUST_DOMAIN).
const (
	KeyTrustDomain      = "trust-domain"
	KeyParentID         = "parent-id"
	KeyOutput           = "output"
	KeyClassName        = "cluster-spiffeid-class-name"
	KeyCRDMissingRetry  = "crd-missing-retry"
	KeyPoolMissingGrace = "pool-missing-grace"
	KeyMaxSVIDTTL       = "max-svid-ttl"
)

// DefaultPoolMissingGrace is how long a Ready binding keeps its outputs
// once its pool is not found, unless configured otherwise: long enough for
// a pool deleted with its pods orphaned to be made again.
const DefaultPoolMissingGrace = 30 * time.Second

// Settings are the operator's own settings.
type Settings struct {
	// Framework holds the common controller settings.
	Framework config.Config
	// TrustDomain of every SPIFFE ID.
	TrustDomain spiffeid.TrustDomain
	// ParentID of every SpiffeEntry.
	ParentID string
	// Outputs to write.
	Outputs []output.Kind
	// ClassName of ClusterSPIFFEID outputs.
	ClassName string
	// Manager holds the process settings: metrics and probe addresses,
	// leader election, client rate limits.
	Manager manager.Options
	// Handler holds the handler options derived from the settings.
	Handler identitybinding.Options
	// CRDPollInterval is how often the operator checks whether the
	// InferencePool CRD has been installed, while it is missing; 0 means
	// 30s (ibcontroller.DefaultCRDPollInterval); the identity boundary's
	// admission policies are read as often. Not a flag: tests shorten it.
	CRDPollInterval time.Duration
	// OrphanSweepInterval is how often outputs whose binding is gone are
	// deleted; 0 means 5m (ibcontroller.DefaultOrphanSweepInterval). Not a
	// flag: tests shorten it.
	OrphanSweepInterval time.Duration
}

// Operator is the identity-operator process for manager.Main.
func Operator() manager.Operator {
	return manager.Operator{
		Name:     "identity-operator",
		AddFlags: addFlags,
		Scheme:   NewScheme,
		Configure: func(_ *manager.Process, o *ctrl.Options) error {
			configure(o)
			return nil
		},
		Setup: func(ctx context.Context, p *manager.Process) (func(), error) {
			s, err := Load(p.Viper)
			if err != nil {
				return nil, fmt.Errorf("invalid settings: %w", err)
			}
			return nil, register(ctx, p.Manager, s, p.Metrics)
		},
	}
}

// addFlags registers the operator's own flags on fs.
func addFlags(fs *pflag.FlagSet) {
	fs.String(KeyTrustDomain, "", "trust domain of every SPIFFE ID (env TRUST_DOMAIN; required)")
	fs.String(KeyParentID, "", "parent ID of every SpiffeEntry: the node alias of the cluster's agents (env PARENT_ID; default spiffe://<trust-domain>/k8s-cluster-nodes)")
	fs.StringSlice(KeyOutput, []string{string(output.KindSpiffeEntry)}, "outputs to write: spiffeentry, clusterspiffeid or both (env OUTPUT, comma-separated)")
	fs.String(KeyClassName, "", "className of ClusterSPIFFEID outputs (env CLUSTER_SPIFFEID_CLASS_NAME)")
	fs.Duration(KeyCRDMissingRetry, 0, "retry interval while the InferencePool CRD is missing; 0 means 1m (env CRD_MISSING_RETRY)")
	fs.Duration(KeyPoolMissingGrace, DefaultPoolMissingGrace, "how long a Ready binding keeps its outputs once its pool is not found, so that a pool replaced (deleted and made again, its pods running on) leaves no pod without an entry; 0 withdraws them at once (env POOL_MISSING_GRACE)")
	fs.Duration(KeyMaxSVIDTTL, identitybinding.DefaultMaxSVIDTTL, "longest x509SVIDTTL or jwtSVIDTTL a binding may ask for; longer is refused with SVIDTTLTooLong (env MAX_SVID_TTL)")
}

// Load reads and validates the settings from v.
func Load(v *viper.Viper) (Settings, error) {
	fw, err := config.Load(v)
	if err != nil {
		return Settings{}, err
	}
	s := Settings{Framework: fw}
	var errs []error
	td, err := spiffeid.TrustDomainFromString(v.GetString(KeyTrustDomain))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyTrustDomain, err))
	}
	s.TrustDomain = td
	s.ParentID = v.GetString(KeyParentID)
	if s.ParentID == "" && err == nil {
		s.ParentID = "spiffe://" + td.Name() + "/k8s-cluster-nodes"
	}
	if p, pErr := spiffeid.FromString(s.ParentID); pErr != nil {
		errs = append(errs, fmt.Errorf("%s %q: %w", KeyParentID, s.ParentID, pErr))
	} else if err == nil && p.TrustDomain() != td {
		errs = append(errs, fmt.Errorf("%s %q is not in trust domain %s", KeyParentID, s.ParentID, td))
	}
	var outs []string
	for _, o := range v.GetStringSlice(KeyOutput) {
		outs = append(outs, strings.Split(o, ",")...)
	}
	if s.Outputs, err = output.ParseKinds(outs); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyOutput, err))
	}
	s.ClassName = v.GetString(KeyClassName)
	grace := v.GetDuration(KeyPoolMissingGrace)
	if grace < 0 {
		errs = append(errs, fmt.Errorf("%s must not be negative, got %s", KeyPoolMissingGrace, grace))
	}
	maxTTL := v.GetDuration(KeyMaxSVIDTTL)
	if maxTTL <= 0 {
		errs = append(errs, fmt.Errorf("%s must be positive, got %s", KeyMaxSVIDTTL, maxTTL))
	}
	if s.Manager, err = manager.Load(v); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	s.Handler = identitybinding.Options{
		TrustDomain:      s.TrustDomain,
		ParentID:         s.ParentID,
		Outputs:          s.Outputs,
		ClassName:        s.ClassName,
		CRDMissingRetry:  v.GetDuration(KeyCRDMissingRetry),
		MaxSVIDTTL:       maxTTL,
		PoolMissingGrace: grace,
	}
	return s, nil
}

// NewScheme returns a scheme with the kinds the operator reads and writes.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, spiffev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

// ManagerOptions returns manager options for s: unstructured objects
// (InferencePools, ClusterSPIFFEIDs) are read from the cache too, so a
// steady reconcile makes no API calls.
func ManagerOptions(s Settings, scheme *runtime.Scheme) ctrl.Options {
	opts := s.Manager.ManagerOptions("identity-operator")
	opts.Scheme = scheme
	configure(&opts)
	return opts
}

// configure sets the operator's client and cache options on opts.
func configure(opts *ctrl.Options) {
	opts.Client = client.Options{Cache: &client.CacheOptions{Unstructured: true}}
	// Only the selector of a Deployment or StatefulSet is ever read; pod
	// templates are most of their size.
	opts.Cache.ByObject = map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:  {Transform: pool.StripPodTemplate},
		&appsv1.StatefulSet{}: {Transform: pool.StripPodTemplate},
	}
}

// Register builds the handler and controller for s and adds them to mgr.
// reg receives the controller metrics.
func Register(ctx context.Context, mgr ctrl.Manager, s Settings, reg prometheus.Registerer) error {
	m, err := controller.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return register(ctx, mgr, s, m)
}

// register is Register with the framework's metrics already made.
func register(ctx context.Context, mgr ctrl.Manager, s Settings, m *controller.Metrics) error {
	served, err := ibcontroller.ServedOutputKinds(mgr.GetRESTMapper())
	if err != nil {
		return fmt.Errorf("find the served output kinds: %w", err)
	}
	s.Handler.ServedOutputs = served
	s.Handler.APIReader = mgr.GetAPIReader()
	s.Handler.Informers = mgr.GetCache()
	serving := &pool.Serving{}
	s.Handler.CRDServing = serving
	policies := &boundary.State{}
	s.Handler.Boundary = policies
	h, err := identitybinding.New(mgr.GetClient(), s.Handler)
	if err != nil {
		return fmt.Errorf("build handler: %w", err)
	}
	c := controller.New(ibcontroller.Name, mgr.GetClient(), h, controller.Options{
		Config:    s.Framework,
		Recorder:  mgr.GetEventRecorder(ibcontroller.Name),
		Metrics:   m,
		APIReader: mgr.GetAPIReader(),
	})
	return ibcontroller.Setup(ctx, mgr, c, ibcontroller.SetupOptions{
		TrustDomain:         s.TrustDomain,
		Outputs:             s.Outputs,
		ServedOutputs:       served,
		CRDPollInterval:     s.CRDPollInterval,
		OrphanSweepInterval: s.OrphanSweepInterval,
		CRDServing:          serving,
		Boundary:            policies,
	})
}
