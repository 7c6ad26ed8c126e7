// Package operator describes the bundle-operator process for
// manager.Main: its flags, scheme, cache and the setup of the TrustBundle
// controller, with its SPIRE connection and the namespaces it reads
// sources from.
package operator

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/spireconn"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	bundlecontroller "github.com/trustplane/trustplane/bundle-operator/internal/controller"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// Flags of this operator, besides the framework's (config.AddFlags). Each
// can also be set by its environment variable (upper case, "_" for "-").
const (
	flagAllowSecretSources  = "allow-secret-sources"
	flagAllowSecretTargets  = "allow-secret-targets"
	flagClusterTrustBundles = "cluster-trust-bundles"
	flagPollInterval        = "poll-interval"
	flagTargetWorkers       = "target-workers"
	flagSourceNamespaces    = "source-namespaces"
)

// serviceAccountNamespaceFile holds the namespace of the pod's service
// account, the operator's own namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// managerDefaults are the framework's process defaults with two changes.
// Fan-out to many namespaces wants a higher client rate (100 requests a
// second, bursts of 200). And the garbage collector runs when the heap has
// grown by a tenth since the last collection (Go's default is 100): the
// live heap is small and mostly informer caches, so a little CPU buys a
// smaller resident heap (docs/bundle-operator.md, Benchmark: 10 against
// 25 and 50 saves a few MiB for no measurable CPU).
func managerDefaults() manager.Options {
	d := manager.Defaults()
	d.KubeQPS, d.KubeBurst, d.GCPercent = 100, 200, 10
	return d
}

// Process describes the bundle-operator process for manager.Main.
func Process() manager.Operator {
	defaults := managerDefaults()
	// Configure decides the source namespaces (they shape the cache);
	// Setup hands them to the controller.
	var srcNamespaces []string
	return manager.Operator{
		Name:     "bundle-operator",
		Defaults: &defaults,
		AddFlags: addFlags,
		Scheme:   newScheme,
		Configure: func(p *manager.Process, o *ctrl.Options) error {
			var err error
			if srcNamespaces, err = sourceNamespaces(p.Viper.GetString(flagSourceNamespaces), ownNamespace); err != nil {
				return err
			}
			o.Cache, err = bundlecontroller.CacheOptions(srcNamespaces, p.Viper.GetBool(flagClusterTrustBundles))
			return err
		},
		Setup: func(ctx context.Context, p *manager.Process) (func(), error) {
			v := p.Viper
			spireReader, closeSpire, err := dialSpire(ctx, v)
			if err != nil {
				return nil, err
			}
			ctrl.Log.Info("bundle-operator sources", "spire", spireReader != nil, "sourceNamespaces", srcNamespaces)
			return closeSpire, bundlecontroller.Setup(p.Manager, bundlecontroller.Options{
				Config:              p.Config,
				Metrics:             p.Metrics,
				Spire:               spireReader,
				AllowSecretSources:  v.GetBool(flagAllowSecretSources),
				AllowSecretTargets:  v.GetBool(flagAllowSecretTargets),
				ClusterTrustBundles: v.GetBool(flagClusterTrustBundles),
				SourceNamespaces:    srcNamespaces,
				PollInterval:        v.GetDuration(flagPollInterval),
				Workers:             v.GetInt(flagTargetWorkers),
			})
		},
	}
}

// addFlags registers the operator's own flags.
func addFlags(fs *pflag.FlagSet) {
	spireconn.AddFlags(fs)
	fs.Bool(flagAllowSecretSources, false, "allow TrustBundles to read Secrets (needs the rights of config/components/secret-sources)")
	fs.Bool(flagAllowSecretTargets, false, "allow TrustBundles to write Secrets (needs the rights of config/components/secret-targets)")
	fs.Bool(flagClusterTrustBundles, false, "allow ClusterTrustBundle targets (the API server must serve certificates.k8s.io/v1 ClusterTrustBundles)")
	fs.Duration(flagPollInterval, bundlecontroller.DefaultPollInterval, "how often to poll SPIRE and ConfigMap/Secret sources for changes")
	fs.Int(flagTargetWorkers, 16, "concurrent target writes per TrustBundle")
	fs.String(flagSourceNamespaces, "", "comma-separated namespaces ConfigMap and Secret sources are read from (default: the operator's own namespace)")
}

// newScheme returns the built-in kinds and TrustBundle.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return scheme, nil
}

// dialSpire connects to SPIRE when a socket or address is configured; a nil
// Reader means spire sources report SpireNotConfigured.
func dialSpire(ctx context.Context, v *viper.Viper) (spire.Reader, func(), error) {
	opts := spireconn.Load(v, "")
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

// sourceNamespaces parses --source-namespaces (comma-separated); empty means
// the operator's own namespace, as own returns it, and none at all when
// that is unknown (outside a pod). Sources elsewhere are refused: whoever
// can edit a source decides what every target trusts.
func sourceNamespaces(flag string, own func() (string, error)) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(flag, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return nil, fmt.Errorf("--%s: %q is not a namespace name: %s", flagSourceNamespaces, ns, strings.Join(errs, "; "))
			}
			out = append(out, ns)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	ns, err := own()
	if err != nil {
		ctrl.Log.Info("no namespace is allowed for ConfigMap and Secret sources: --"+flagSourceNamespaces+
			" is not set and the operator's own namespace is unknown", "reason", err.Error())
		return nil, nil
	}
	return []string{ns}, nil
}

// ownNamespace returns the namespace of the pod's service account.
func ownNamespace() (string, error) {
	raw, err := os.ReadFile(serviceAccountNamespaceFile)
	if err != nil {
		return "", fmt.Errorf("read the pod's namespace: %w", err)
	}
	ns := strings.TrimSpace(string(raw))
	if ns == "" {
		return "", fmt.Errorf("%s is empty", serviceAccountNamespaceFile)
	}
	return ns, nil
}
