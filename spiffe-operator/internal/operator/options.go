package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/spiffe-operator/internal/class"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// Keys of the operator's own settings (flags; env vars upper-cased with
// underscores, e.g. SPIRE_SOCKET).
const (
	KeyTrustDomain      = "trust-domain"
	KeyEntryIDPrefix    = "entry-id-prefix"
	KeyPageSize         = "spire-page-size"
	KeyWriteConcurrency = "spire-write-concurrency"
	KeyRPCTimeout       = "spire-rpc-timeout"
	KeyCollectOrphans   = "collect-orphans"
	KeyClusterName      = "cluster-name"
	KeyClassName        = "class-name"
	KeyWatchClassless   = "watch-classless"
	KeyDryRun           = "dry-run"
)

// Options are the settings of one operator process.
type Options struct {
	// Config holds the framework settings; RequeueAfter is also the SPIRE resync interval.
	Config config.Config
	// Connect says how to reach SPIRE.
	Connect spireconn.Options
	// TrustDomain is the SPIRE server's trust domain; objects of another are refused.
	TrustDomain string
	// EntryIDPrefix starts the ID of every entry the operator creates; empty
	// means entries.ClusterPrefix of the cluster's kube-system namespace.
	EntryIDPrefix string
	// PageSize is the ListEntries page size.
	PageSize int32
	// WriteConcurrency is how many batch calls may be in flight.
	WriteConcurrency int
	// RPCTimeout bounds each SPIRE call.
	RPCTimeout time.Duration
	// CollectOrphans deletes entries (with this prefix) whose object no longer exists.
	CollectOrphans bool
	// ClusterName is the cluster's name in the SPIRE server's k8s_psat node
	// attestor, the {clusterName} of parent ID templates (the default one
	// uses it).
	ClusterName string
	// ClassName is the class of objects this instance takes; empty takes
	// the objects without one.
	ClassName string
	// DryRun makes the operator write nothing to SPIRE: it reads SPIRE,
	// logs and counts every write it would make, and reports DryRun on
	// every object.
	DryRun bool
	// WatchClassless makes an instance with a ClassName also take objects
	// without one.
	WatchClassless bool
	// Manager holds the process settings: metrics and probe addresses,
	// leader election, client rate limits (50 QPS, burst 100) and the GC
	// target (10: the operator is mostly idle, so it trades a little CPU for memory).
	Manager manager.Options
	// WriteGuard, when set, is asked before every SPIRE write (see
	// manager.LeaseGuard); not a flag.
	WriteGuard spire.WriteGuard
}

// AddFlags registers the framework's, the manager's and the operator's
// flags on fs (Operator's flag set without the logger's).
func AddFlags(fs *pflag.FlagSet) {
	config.AddFlags(fs)
	addFlags(fs)
	manager.AddFlags(fs, managerDefaults())
}

// managerDefaults: the operator is mostly idle, so it trades a little CPU
// for memory with a low GC target.
func managerDefaults() manager.Options {
	d := manager.Defaults()
	d.GCPercent = 10
	return d
}

// addFlags registers the operator's own flags on fs.
func addFlags(fs *pflag.FlagSet) {
	spireconn.AddFlags(fs)
	fs.String(KeyTrustDomain, "", "the SPIRE server's trust domain; objects of other trust domains are refused")
	fs.String(KeyEntryIDPrefix, "", "prefix of the IDs of entries this operator creates (it owns exactly those); empty means trustplane.<cluster tag>., from the kube-system namespace's UID. Instances in different clusters sharing a SPIRE server must not share a prefix")
	fs.Int32(KeyPageSize, 1000, "ListEntries page size")
	fs.Int(KeyWriteConcurrency, 1, "SPIRE batch calls in flight at once per pass; 1 suits a sqlite datastore, 4 converged fastest on PostgreSQL (docs/spiffe-operator.md)")
	fs.Duration(KeyRPCTimeout, 30*time.Second, "timeout of each SPIRE call")
	fs.Bool(KeyCollectOrphans, true, "delete entries with this operator's prefix whose object no longer exists")
	fs.String(KeyClassName, "", "take only SpiffeRegistrations, SpiffeEntries and SpiffeFederations of this spec.className (several instances, for several SPIRE servers, in one cluster); empty takes those without one")
	fs.Bool(KeyDryRun, false, "write nothing to SPIRE: log and count (trustplane_spire_dry_run_writes_total) every entry write the operator would make, and report Ready=False with reason DryRun")
	fs.Bool(KeyWatchClassless, false, "with --class-name, also take objects without a className")
	fs.String(KeyClusterName, "", "the cluster's name in the SPIRE server's k8s_psat node attestor configuration; per-node parent IDs (the default) need it")
}

// Load reads and validates Options from v.
func Load(v *viper.Viper) (Options, error) {
	cfg, err := config.Load(v)
	if err != nil {
		return Options{}, err
	}
	o := Options{
		Config:           cfg,
		Connect:          spireconn.Load(v, v.GetString(KeyTrustDomain)),
		TrustDomain:      v.GetString(KeyTrustDomain),
		EntryIDPrefix:    v.GetString(KeyEntryIDPrefix),
		PageSize:         v.GetInt32(KeyPageSize),
		WriteConcurrency: v.GetInt(KeyWriteConcurrency),
		RPCTimeout:       v.GetDuration(KeyRPCTimeout),
		CollectOrphans:   v.GetBool(KeyCollectOrphans),
		ClusterName:      v.GetString(KeyClusterName),
		ClassName:        v.GetString(KeyClassName),
		WatchClassless:   v.GetBool(KeyWatchClassless),
		DryRun:           v.GetBool(KeyDryRun),
	}
	if o.Manager, err = manager.Load(v); err != nil {
		return Options{}, err
	}
	return o, o.Validate()
}

// Validate reports every invalid setting.
func (o Options) Validate() error {
	var errs []error
	if err := o.Connect.Validate(); err != nil {
		errs = append(errs, err)
	}
	// An empty prefix is derived from the cluster when the operator starts.
	if o.EntryIDPrefix != "" {
		if err := (entries.IDScheme{Prefix: o.EntryIDPrefix}).ValidateChosen(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", KeyEntryIDPrefix, err))
		}
	}
	if o.ClusterName != "" && !validClusterName(o.ClusterName) {
		errs = append(errs, fmt.Errorf("%s %q: want letters, digits, '.', '-' or '_' (it becomes one segment of the agents' SPIFFE IDs)", KeyClusterName, o.ClusterName))
	}
	if o.ClassName != "" {
		if err := class.ValidName(o.ClassName); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", KeyClassName, err))
		}
		if err := manager.CheckInstance(o.ClassName); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", KeyClassName, err))
		}
	}
	if o.PageSize < 1 {
		errs = append(errs, fmt.Errorf("%s must be positive", KeyPageSize))
	}
	if o.WriteConcurrency < 1 {
		errs = append(errs, fmt.Errorf("%s must be at least 1", KeyWriteConcurrency))
	}
	return errors.Join(errs...)
}

// validClusterName reports whether name can be one path segment of a SPIFFE
// ID, as in the k8s_psat agent ID spiffe://<td>/spire/agent/k8s_psat/<cluster>/<node UID>.
func validClusterName(name string) bool {
	if name == "." || name == ".." {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
