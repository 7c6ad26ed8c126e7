package manager

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
)

// Operator describes one operator process for Main and Run: its name, its
// own flags, its scheme and what it adds to the manager. Everything else
// (flags of the framework, the manager and the logger, viper, the GC target,
// the REST config, the manager, health checks and metrics) is the same for
// every operator and done by Run.
type Operator struct {
	// Name names the flag set, the logger and the leader election lease.
	Name string
	// Instance, when set, returns what sets this process's instance apart
	// from other instances of the operator in the cluster (its class, say),
	// from the settings; a non-empty answer gives it a leader election lease
	// of its own (InstanceName). Nil or empty: one lease for the operator.
	Instance func(v *viper.Viper) string
	// Defaults are the operator's defaults of the manager flags; nil means
	// Defaults().
	Defaults *Options
	// AddFlags registers the operator's own flags; may be nil.
	AddFlags func(fs *pflag.FlagSet)
	// Scheme returns the kinds the operator reads and writes.
	Scheme func() (*runtime.Scheme, error)
	// Configure adjusts the controller-runtime manager options (cache,
	// client) before the manager is built; may be nil.
	Configure func(p *Process, o *ctrl.Options) error
	// Setup adds the operator's controllers and runnables to p.Manager. The
	// returned function, when not nil, runs after the manager stopped (to
	// close connections).
	Setup func(ctx context.Context, p *Process) (cleanup func(), err error)
}

// Process is what Run hands to an operator's Configure and Setup.
type Process struct {
	// Viper holds every setting (flags over environment over defaults):
	// read the operator's own flags from it.
	Viper *viper.Viper
	// Config holds the framework settings for the Controllers.
	Config config.Config
	// Options are the manager settings.
	Options Options
	// RestConfig is the API server's config with the client rate limits.
	RestConfig *rest.Config
	// Manager is the controller-runtime manager (nil in Configure).
	Manager ctrl.Manager
	// Registry receives the operator's own metrics: controller-runtime's
	// registry, served on the metrics address.
	Registry prometheus.Registerer
	// Metrics are the framework's controller metrics, for controller.Options.
	Metrics *controller.Metrics
	// LeaseGuard, with leader election, refuses the Kubernetes API writes
	// of a replica whose lease may have passed to another; writers to
	// anything else call its Allow before each write. Nil without leader
	// election.
	LeaseGuard *LeaseGuard
}

// FlagSet returns every flag of the operator: the framework's
// (config.AddFlags), the manager's, the operator's own and the logger's
// (bound to the returned zap.Options), and --kubeconfig.
func (op Operator) FlagSet() (*pflag.FlagSet, *zap.Options) {
	fs := pflag.NewFlagSet(op.Name, pflag.ContinueOnError)
	config.AddFlags(fs)
	d := Defaults()
	if op.Defaults != nil {
		d = *op.Defaults
	}
	AddFlags(fs, d)
	if op.AddFlags != nil {
		op.AddFlags(fs)
	}
	zapOpts := &zap.Options{}
	goFlags := flag.NewFlagSet(op.Name, flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	// controller-runtime registers --kubeconfig on the standard flag set;
	// take that one flag, not the rest of a test binary's flags.
	if f := flag.CommandLine.Lookup("kubeconfig"); f != nil {
		goFlags.Var(f.Value, f.Name, f.Usage)
	}
	fs.AddGoFlagSet(goFlags)
	return fs, zapOpts
}

// Main runs op with the process's arguments until SIGTERM or SIGINT and
// exits 1, naming the operator, when it fails. --help prints the usage and
// exits 0.
func Main(op Operator) {
	if err := Run(ctrl.SetupSignalHandler(), op, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", op.Name, err)
		os.Exit(1)
	}
}

// Run parses args, sets up logging, loads and validates the settings, sets
// the GC target, builds the manager with health checks and the framework's
// metrics, lets op set up its controllers and runs the manager until ctx
// ends. With --help (or -h) it writes the usage to out and returns nil.
func Run(ctx context.Context, op Operator, args []string, out io.Writer) error {
	fs, zapOpts := op.FlagSet()
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(zapOpts), zap.RawZapOpts(withLazyFields())))
	log := ctrl.Log.WithName(op.Name)

	v, err := config.NewViper(fs)
	if err != nil {
		return err
	}
	p := &Process{Viper: v, Registry: metrics.Registry}
	if p.Config, err = config.Load(v); err != nil {
		return err
	}
	if p.Options, err = Load(v); err != nil {
		return err
	}
	p.Options.ApplyGCPercent()
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	p.RestConfig = p.Options.RestConfig(restCfg)

	instance := ""
	if op.Instance != nil {
		instance = op.Instance(v)
	}
	if err := CheckInstance(instance); err != nil {
		return fmt.Errorf("instance: %w", err)
	}
	mgrOpts := p.Options.ManagerOptions(InstanceName(op.Name, instance))
	if mgrOpts.LeaderElection {
		p.LeaseGuard = NewLeaseGuard(mgrOpts.LeaderElectionID)
		p.RestConfig.Wrap(p.LeaseGuard.Wrap)
	}
	if mgrOpts.Scheme, err = op.Scheme(); err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	if op.Configure != nil {
		if err := op.Configure(p, &mgrOpts); err != nil {
			return err
		}
	}
	if p.Manager, err = ctrl.NewManager(p.RestConfig, mgrOpts); err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := AddHealthChecks(p.Manager); err != nil {
		return err
	}
	if p.Metrics, err = controller.NewMetrics(p.Registry); err != nil {
		return err
	}
	cleanup, err := op.Setup(ctx, p)
	if cleanup != nil {
		defer cleanup()
	}
	if err != nil {
		return err
	}
	log.Info("starting", "qps", p.RestConfig.QPS, "burst", p.RestConfig.Burst, "defaultEnvironment", p.Config.DefaultEnvironment)
	if err := p.Manager.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}
