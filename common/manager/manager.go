// Package manager runs an operator process (Main, Run: flags, logging,
// settings, manager, health checks and metrics in one place) and holds the
// process-level settings every operator's
// controller-runtime manager needs: metrics, health probe and pprof
// addresses, leader election, Kubernetes client rate limits and the GC
// target. Like package config, the settings come from flags and environment
// variables through viper and are passed in, never kept in globals.
package manager

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trustplane/trustplane/common/metricsauth"
)

// Keys of the manager settings, as flags; the environment variable of each is
// the key upper-cased with dashes turned into underscores.
const (
	KeyMetricsAddr          = "metrics-bind-address"
	KeyMetricsSecure        = "metrics-secure"
	KeyMetricsCertDir       = "metrics-cert-dir"
	KeyProbeAddr            = "health-probe-bind-address"
	KeyPprofAddr            = "pprof-bind-address"
	KeyLeaderElect          = "leader-elect"
	KeyLeaderElectNamespace = "leader-election-namespace"
	KeyKubeQPS              = "kube-api-qps"
	KeyKubeBurst            = "kube-api-burst"
	KeyGCPercent            = "gc-percent"
)

// Options are the manager settings of one operator process.
type Options struct {
	// MetricsAddr serves Prometheus metrics; "0" disables.
	MetricsAddr string
	// MetricsSecure serves the metrics over HTTPS, and only to clients
	// whose bearer token the API server accepts and whose user may get
	// /metrics (package metricsauth); false serves plain HTTP to whoever
	// reaches the port.
	MetricsSecure bool
	// MetricsCertDir holds the metrics server's tls.crt and tls.key;
	// empty: those of controller-runtime's
	// default directory, <tmp>/k8s-metrics-server/serving-certs, when they
	// are there, else a self-signed certificate made at start.
	MetricsCertDir string
	// ProbeAddr serves /healthz and /readyz; "0" disables.
	ProbeAddr string
	// PprofAddr serves net/http/pprof; "0" disables.
	PprofAddr string
	// LeaderElect runs one active replica among several.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease; empty means the pod's namespace.
	LeaderElectionNamespace string
	// KubeQPS and KubeBurst limit the Kubernetes client.
	KubeQPS   float32
	KubeBurst int
	// GCPercent is the Go GC target (debug.SetGCPercent); 0 leaves GOGC's.
	GCPercent int
	// Reentrant lets one process build this operator's manager more than
	// once (a test that restarts the operator in place): controller names
	// are then not checked for uniqueness. Not a flag.
	Reentrant bool
}

// Defaults are the settings an operator starts from; it may change them
// before AddFlags, e.g. a higher QPS for an operator that fans out.
func Defaults() Options {
	return Options{MetricsAddr: ":8080", MetricsSecure: true, ProbeAddr: ":8081", PprofAddr: "0",
		KubeQPS: 50, KubeBurst: 100, GCPercent: 0}
}

// AddFlags registers the manager flags on fs with the given defaults.
func AddFlags(fs *pflag.FlagSet, d Options) {
	fs.String(KeyMetricsAddr, d.MetricsAddr, "metrics address; 0 disables (env METRICS_BIND_ADDRESS)")
	fs.Bool(KeyMetricsSecure, d.MetricsSecure, "serve metrics over HTTPS, only to a bearer token whose user may get /metrics; false: plain HTTP to anyone (env METRICS_SECURE)")
	fs.String(KeyMetricsCertDir, d.MetricsCertDir, "directory of the metrics server's tls.crt and tls.key; empty: a self-signed certificate (env METRICS_CERT_DIR)")
	fs.String(KeyProbeAddr, d.ProbeAddr, "health probe address; 0 disables (env HEALTH_PROBE_BIND_ADDRESS)")
	fs.String(KeyPprofAddr, d.PprofAddr, "net/http/pprof address; 0 disables (env PPROF_BIND_ADDRESS)")
	fs.Bool(KeyLeaderElect, d.LeaderElect, "elect a leader so that one replica is active (env LEADER_ELECT)")
	fs.String(KeyLeaderElectNamespace, d.LeaderElectionNamespace, "namespace of the leader election lease (env LEADER_ELECTION_NAMESPACE)")
	fs.Float32(KeyKubeQPS, d.KubeQPS, "Kubernetes client queries per second (env KUBE_API_QPS)")
	fs.Int(KeyKubeBurst, d.KubeBurst, "Kubernetes client burst (env KUBE_API_BURST)")
	fs.Int(KeyGCPercent, d.GCPercent, "Go GC target percentage; 0 keeps GOGC's (env GC_PERCENT; ignored when GOGC is set)")
}

// Load reads the manager settings from v (see config.NewViper) and validates them.
func Load(v *viper.Viper) (Options, error) {
	o := Options{
		MetricsAddr:             v.GetString(KeyMetricsAddr),
		MetricsSecure:           v.GetBool(KeyMetricsSecure),
		MetricsCertDir:          v.GetString(KeyMetricsCertDir),
		ProbeAddr:               v.GetString(KeyProbeAddr),
		PprofAddr:               v.GetString(KeyPprofAddr),
		LeaderElect:             v.GetBool(KeyLeaderElect),
		LeaderElectionNamespace: v.GetString(KeyLeaderElectNamespace),
		KubeQPS:                 float32(v.GetFloat64(KeyKubeQPS)),
		KubeBurst:               v.GetInt(KeyKubeBurst),
		GCPercent:               v.GetInt(KeyGCPercent),
	}
	var errs []error
	if o.KubeQPS <= 0 {
		errs = append(errs, fmt.Errorf("%s must be positive, got %v", KeyKubeQPS, o.KubeQPS))
	}
	if o.KubeBurst < 1 {
		errs = append(errs, fmt.Errorf("%s must be at least 1, got %d", KeyKubeBurst, o.KubeBurst))
	}
	if o.MetricsCertDir != "" && !o.MetricsSecure {
		errs = append(errs, fmt.Errorf("%s is set but %s is false: the certificate would not be used", KeyMetricsCertDir, KeyMetricsSecure))
	}
	if o.GCPercent < 0 {
		errs = append(errs, fmt.Errorf("%s must not be negative, got %d", KeyGCPercent, o.GCPercent))
	}
	if len(errs) > 0 {
		return Options{}, fmt.Errorf("invalid manager settings: %w", errors.Join(errs...))
	}
	return o, nil
}

// RestConfig applies the client rate limits to a copy of cfg.
func (o Options) RestConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS = o.KubeQPS
	out.Burst = o.KubeBurst
	return out
}

// InstanceName names one of several instances of the operator called name
// in one cluster (instance is what sets it apart, say its class): name
// itself for the only one (instance empty), else name-instance, or, where
// that would make no valid object name of the lease (name-instance
// .trustplane.dev must be a DNS subdomain: "a..b" makes none), name- and
// the first 16 hex digits of instance's SHA-256. Give it to ManagerOptions,
// so that each instance elects its leader on a lease of its own; refuse an
// instance CheckInstance refuses first.
func InstanceName(name, instance string) string {
	if instance == "" {
		return name
	}
	if n := name + "-" + instance; len(validation.IsDNS1123Subdomain(n+leaseSuffix)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(instance))
	return name + "-" + hex.EncodeToString(sum[:])[:hashedInstanceLen]
}

// CheckInstance returns an error when instance, given to InstanceName,
// would lead on the lease of another instance: an instance of 16
// lowercase hex digits gets name-<those digits>, the very name
// InstanceName gives an instance whose own name makes no valid lease name
// and whose SHA-256 starts with them. Refusing that form (InstanceName's
// names are unchanged, so no running instance moves to another lease)
// keeps every instance's lease its own.
func CheckInstance(instance string) error {
	if len(instance) == hashedInstanceLen && strings.Trim(instance, "0123456789abcdef") == "" {
		return fmt.Errorf("%q has the form (%d lowercase hex digits) of the lease name given to an instance whose name makes no valid lease name, "+
			"so it could lead on that instance's lease: choose another", instance, hashedInstanceLen)
	}
	return nil
}

// hashedInstanceLen is how many hex digits of an instance's SHA-256
// InstanceName uses where the instance makes no valid lease name.
const hashedInstanceLen = 16

// leaseSuffix ends the name of every operator's leader election lease.
const leaseSuffix = ".trustplane.dev"

// ManagerOptions returns controller-runtime manager options for the operator
// called name (its leader election lease is <name>.trustplane.dev). Set the
// Scheme, Cache and other fields on the result.
func (o Options) ManagerOptions(name string) ctrl.Options {
	return ctrl.Options{
		Metrics:                 o.metricsServerOptions(),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        name + leaseSuffix,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		RenewDeadline:           ptrTo(RenewDeadline),
		Controller:              crconfig.Controller{SkipNameValidation: &o.Reentrant},
	}
}

func ptrTo[T any](v T) *T { return &v }

// metricsServerOptions serves the metrics on MetricsAddr; when
// MetricsSecure, over HTTPS (HTTP/1.1 only, as kubebuilder's operators
// default to since the HTTP/2 stream-reset attacks) behind metricsauth.
func (o Options) metricsServerOptions() metricsserver.Options {
	if !o.MetricsSecure {
		return metricsserver.Options{BindAddress: o.MetricsAddr}
	}
	return metricsserver.Options{
		BindAddress:    o.MetricsAddr,
		SecureServing:  true,
		CertDir:        o.MetricsCertDir,
		FilterProvider: metricsauth.Provider(metricsauth.Options{}),
		TLSOpts:        []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
}

// ApplyGCPercent sets the GC target unless it is 0 or GOGC is set.
func (o Options) ApplyGCPercent() {
	if _, set := os.LookupEnv("GOGC"); set || o.GCPercent == 0 {
		return
	}
	debug.SetGCPercent(o.GCPercent)
}

// AddHealthChecks adds ping checks on /healthz and /readyz.
func AddHealthChecks(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("ready check: %w", err)
	}
	return nil
}
