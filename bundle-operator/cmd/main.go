// Command bundle-operator runs the TrustBundle controller: it validates CA
// bundles from SPIRE, ConfigMaps, Secrets and inline PEM and distributes
// them to ConfigMaps, Secrets and the caBundle of annotated webhooks,
// APIServices and CRDs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	bundlecontroller "github.com/trustplane/trustplane/bundle-operator/internal/controller"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// Flags of this operator, besides the framework's (config.AddFlags). Each
// can also be set by its environment variable (upper case, "_" for "-").
const (
	flagMetricsAddr        = "metrics-bind-address"
	flagProbeAddr          = "health-probe-bind-address"
	flagPprofAddr          = "pprof-bind-address"
	flagLeaderElect        = "leader-elect"
	flagQPS                = "kube-api-qps"
	flagBurst              = "kube-api-burst"
	flagSpireSocket        = "spire-socket"
	flagSpireAddress       = "spire-address"
	flagSpireWorkloadAPI   = "workload-api-socket"
	flagSpireServerID      = "spire-server-id"
	flagAllowSecretSources = "allow-secret-sources"
	flagPollInterval       = "poll-interval"
	flagTargetWorkers      = "target-workers"
	flagGCPercent          = "gc-percent"
)

// defaultGCPercent makes the garbage collector run when the heap has grown
// by a quarter since the last collection instead of doubling (Go's default
// 100): the live heap is small and mostly informer caches, so this trades a
// little CPU for a smaller resident heap. In the benchmark (docs/
// bundle-operator.md) it saves about 5 MiB of RSS against 100 and 1.4 MiB
// against 50, for about 4% more CPU than 50.
const defaultGCPercent = 25

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bundle-operator:", err)
		os.Exit(1)
	}
}

// newFlagSet returns the operator's flags: the framework's, its own and the
// logger's (bound to the returned zap.Options).
func newFlagSet() (*pflag.FlagSet, *zap.Options) {
	fs := pflag.NewFlagSet("bundle-operator", pflag.ContinueOnError)
	config.AddFlags(fs)
	fs.String(flagMetricsAddr, ":8080", "address of the metrics endpoint; 0 disables it")
	fs.String(flagProbeAddr, ":8081", "address of the health probes; 0 disables them")
	fs.String(flagPprofAddr, "0", "address of the pprof endpoint, to see what the memory is made of; 0 disables it")
	fs.Bool(flagLeaderElect, false, "elect a leader so that only one replica writes")
	fs.Float32(flagQPS, 100, "queries per second allowed to the Kubernetes API")
	fs.Int(flagBurst, 200, "burst of queries allowed to the Kubernetes API")
	fs.String(flagSpireSocket, "", "SPIRE Server admin API Unix socket")
	fs.String(flagSpireAddress, "", "SPIRE Server address (host:port) for mTLS; needs --workload-api-socket")
	fs.String(flagSpireWorkloadAPI, "", "SPIRE agent Workload API socket giving the operator's X509-SVID for mTLS")
	fs.String(flagSpireServerID, "", "SPIFFE ID the SPIRE Server presents over mTLS")
	fs.Bool(flagAllowSecretSources, false, "allow TrustBundles to read Secrets")
	fs.Duration(flagPollInterval, bundlecontroller.DefaultPollInterval, "how often to poll SPIRE and ConfigMap/Secret sources for changes")
	fs.Int(flagTargetWorkers, 16, "concurrent target writes per TrustBundle")
	fs.Int(flagGCPercent, defaultGCPercent, "garbage collection target percentage (debug.SetGCPercent); ignored when GOGC is set")
	zapOpts := &zap.Options{}
	goFlags := flag.NewFlagSet("", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	return fs, zapOpts
}

func run() error {
	fs, zapOpts := newFlagSet()
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(zapOpts)))

	v, err := config.NewViper(fs)
	if err != nil {
		return err
	}
	cfg, err := config.Load(v)
	if err != nil {
		return err
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(v.GetInt(flagGCPercent))
	}

	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	restCfg.QPS = float32(v.GetFloat64(flagQPS))
	restCfg.Burst = v.GetInt(flagBurst)

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cacheOpts, err := bundlecontroller.CacheOptions()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: v.GetString(flagMetricsAddr)},
		HealthProbeBindAddress: v.GetString(flagProbeAddr),
		PprofBindAddress:       v.GetString(flagPprofAddr),
		LeaderElection:         v.GetBool(flagLeaderElect),
		LeaderElectionID:       "bundle-operator.trustplane.dev",
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("ready check: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	spireReader, closeSpire, err := dialSpire(ctx, v)
	if err != nil {
		return err
	}
	defer closeSpire()

	m, err := controller.NewMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	if err := bundlecontroller.Setup(mgr, bundlecontroller.Options{
		Config:             cfg,
		Metrics:            m,
		Spire:              spireReader,
		AllowSecretSources: v.GetBool(flagAllowSecretSources),
		PollInterval:       v.GetDuration(flagPollInterval),
		Workers:            v.GetInt(flagTargetWorkers),
	}); err != nil {
		return fmt.Errorf("set up controller: %w", err)
	}
	ctrl.Log.Info("starting bundle-operator", "qps", restCfg.QPS, "burst", restCfg.Burst, "spire", spireReader != nil)
	return mgr.Start(ctx)
}

// dialSpire connects to SPIRE when a socket or address is configured; a nil
// Reader means spire sources report SpireNotConfigured.
func dialSpire(ctx context.Context, v *viper.Viper) (spire.Reader, func(), error) {
	opts := spire.Options{
		SocketPath:        v.GetString(flagSpireSocket),
		ServerAddress:     v.GetString(flagSpireAddress),
		WorkloadAPISocket: v.GetString(flagSpireWorkloadAPI),
		ServerID:          v.GetString(flagSpireServerID),
	}
	if !opts.Enabled() {
		return nil, func() {}, nil
	}
	dialCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := spire.Dial(dialCtx, opts)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}
