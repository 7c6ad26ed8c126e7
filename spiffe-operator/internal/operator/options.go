package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// Keys of the operator's own settings (flags; env vars upper-cased with
// underscores, e.g. SPIRE_SOCKET).
const (
	KeySpireSocket       = "spire-socket"
	KeySpireAddress      = "spire-address"
	KeySpireServerID     = "spire-server-id"
	KeyWorkloadAPISocket = "workload-api-socket"
	KeySVIDCertFile      = "svid-cert-file"
	KeySVIDKeyFile       = "svid-key-file"
	KeyBundleFile        = "bundle-file"
	KeyTrustDomain       = "trust-domain"
	KeyEntryIDPrefix     = "entry-id-prefix"
	KeyPageSize          = "spire-page-size"
	KeyWriteConcurrency  = "spire-write-concurrency"
	KeyRPCTimeout        = "spire-rpc-timeout"
	KeyCollectOrphans    = "collect-orphans"
	KeyKubeQPS           = "kube-api-qps"
	KeyKubeBurst         = "kube-api-burst"
	KeyMetricsAddr       = "metrics-bind-address"
	KeyProbeAddr         = "health-probe-bind-address"
	KeyLeaderElect       = "leader-elect"
	KeyPprofAddr         = "pprof-bind-address"
	KeyGCPercent         = "gc-percent"
)

// Options are the settings of one operator process.
type Options struct {
	// Config holds the framework settings; RequeueAfter is also the SPIRE resync interval.
	Config config.Config
	// Connect says how to reach SPIRE.
	Connect spire.ConnectOptions
	// TrustDomain is the SPIRE server's trust domain; objects of another are refused.
	TrustDomain string
	// EntryIDPrefix starts the ID of every entry the operator creates.
	EntryIDPrefix string
	// PageSize is the ListEntries page size.
	PageSize int32
	// WriteConcurrency is how many batch calls may be in flight.
	WriteConcurrency int
	// RPCTimeout bounds each SPIRE call.
	RPCTimeout time.Duration
	// CollectOrphans deletes entries (with this prefix) whose object no longer exists.
	CollectOrphans bool
	// KubeQPS and KubeBurst are the Kubernetes client rate limits.
	KubeQPS float32
	// KubeBurst is the Kubernetes client burst.
	KubeBurst int
	// MetricsAddr serves /metrics ("0" disables).
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz ("0" disables).
	ProbeAddr string
	// LeaderElect enables leader election.
	LeaderElect bool
	// PprofAddr serves net/http/pprof ("" or "0" disables).
	PprofAddr string
	// GCPercent is the Go GC target percentage; 0 keeps the runtime's (GOGC).
	GCPercent int
}

// AddFlags registers the framework's and the operator's flags on fs.
func AddFlags(fs *pflag.FlagSet) {
	config.AddFlags(fs)
	fs.String(KeySpireSocket, "", "SPIRE server admin Unix socket (set this or --spire-address)")
	fs.String(KeySpireAddress, "", "SPIRE server host:port for mTLS with the operator's X509-SVID")
	fs.String(KeySpireServerID, "", "SPIFFE ID the SPIRE server must present over mTLS (default spiffe://<trust-domain>/spire/server)")
	fs.String(KeyWorkloadAPISocket, "", "Workload API address the operator's X509-SVID comes from, e.g. unix:///run/spire/agent-sockets/spire-agent.sock")
	fs.String(KeySVIDCertFile, "", "PEM X509-SVID to use instead of the Workload API")
	fs.String(KeySVIDKeyFile, "", "PEM key of --svid-cert-file")
	fs.String(KeyBundleFile, "", "PEM bundle of the SPIRE server's trust domain, with --svid-cert-file")
	fs.String(KeyTrustDomain, "", "the SPIRE server's trust domain; objects of other trust domains are refused")
	fs.String(KeyEntryIDPrefix, entries.DefaultIDPrefix, "prefix of the IDs of entries this operator creates; use one per operator instance sharing a SPIRE server")
	fs.Int32(KeyPageSize, 1000, "ListEntries page size")
	fs.Int(KeyWriteConcurrency, 2, "SPIRE batch calls in flight at once")
	fs.Duration(KeyRPCTimeout, 30*time.Second, "timeout of each SPIRE call")
	fs.Bool(KeyCollectOrphans, true, "delete entries with this operator's prefix whose object no longer exists")
	fs.Float32(KeyKubeQPS, 50, "Kubernetes client QPS")
	fs.Int(KeyKubeBurst, 100, "Kubernetes client burst")
	fs.String(KeyMetricsAddr, ":8080", "metrics address (0 disables)")
	fs.String(KeyProbeAddr, ":8081", "health probe address (0 disables)")
	fs.Bool(KeyLeaderElect, false, "enable leader election (run several replicas, one active)")
	fs.String(KeyPprofAddr, "0", "net/http/pprof address (0 disables)")
	fs.Int(KeyGCPercent, 25, "Go GC target percentage: heap may grow this much over the live data between collections; the operator is mostly idle, so it trades a little CPU for memory (0 keeps GOGC)")
}

// Load reads and validates Options from v.
func Load(v *viper.Viper) (Options, error) {
	cfg, err := config.Load(v)
	if err != nil {
		return Options{}, err
	}
	o := Options{
		Config: cfg,
		Connect: spire.ConnectOptions{
			SocketPath: v.GetString(KeySpireSocket), Address: v.GetString(KeySpireAddress),
			ServerID: v.GetString(KeySpireServerID), WorkloadAPISocket: v.GetString(KeyWorkloadAPISocket),
			SVIDCertFile: v.GetString(KeySVIDCertFile), SVIDKeyFile: v.GetString(KeySVIDKeyFile), BundleFile: v.GetString(KeyBundleFile),
		},
		TrustDomain:      v.GetString(KeyTrustDomain),
		EntryIDPrefix:    v.GetString(KeyEntryIDPrefix),
		PageSize:         v.GetInt32(KeyPageSize),
		WriteConcurrency: v.GetInt(KeyWriteConcurrency),
		RPCTimeout:       v.GetDuration(KeyRPCTimeout),
		CollectOrphans:   v.GetBool(KeyCollectOrphans),
		KubeQPS:          float32(v.GetFloat64(KeyKubeQPS)),
		KubeBurst:        v.GetInt(KeyKubeBurst),
		MetricsAddr:      v.GetString(KeyMetricsAddr),
		ProbeAddr:        v.GetString(KeyProbeAddr),
		LeaderElect:      v.GetBool(KeyLeaderElect),
		PprofAddr:        v.GetString(KeyPprofAddr),
		GCPercent:        v.GetInt(KeyGCPercent),
	}
	if o.Connect.Address != "" && o.Connect.ServerID == "" && o.TrustDomain != "" {
		o.Connect.ServerID = "spiffe://" + o.TrustDomain + "/spire/server"
	}
	return o, o.Validate()
}

// Validate reports every invalid setting.
func (o Options) Validate() error {
	var errs []error
	if err := o.Connect.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := (entries.IDScheme{Prefix: o.EntryIDPrefix}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyEntryIDPrefix, err))
	}
	if o.PageSize < 1 {
		errs = append(errs, fmt.Errorf("%s must be positive", KeyPageSize))
	}
	if o.WriteConcurrency < 1 {
		errs = append(errs, fmt.Errorf("%s must be at least 1", KeyWriteConcurrency))
	}
	if o.GCPercent < 0 {
		errs = append(errs, fmt.Errorf("%s must not be negative", KeyGCPercent))
	}
	if o.KubeQPS <= 0 || o.KubeBurst < 1 {
		errs = append(errs, fmt.Errorf("%s and %s must be positive", KeyKubeQPS, KeyKubeBurst))
	}
	return errors.Join(errs...)
}
