// Package config loads the framework's settings with viper: defaults, then
// environment variables (REQUEUE_AFTER, JITTER_FACTOR, ...), then flags
// (--requeue-after, --jitter-factor, ...). The result is a plain struct that
// is validated once at startup and passed to the Controller; nothing is kept
// in package-level variables.
package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane/common/labels"
)

// Keys of the framework settings, as flags; the environment variable of each
// is the key upper-cased with dashes turned into underscores.
const (
	KeyRequeueAfter            = "requeue-after"
	KeyRequeueAfterOnError     = "requeue-after-on-error"
	KeyJitterFactor            = "jitter-factor"
	KeyMaxConcurrentReconciles = "max-concurrent-reconciles"
	KeyDefaultEnvironment      = "default-environment"
	KeyEnvironments            = "environments"
	KeyMaxBackoff              = "max-backoff"
	KeyStatusMaxWait           = "status-max-wait"
)

// Config holds the framework settings of one operator process.
type Config struct {
	// RequeueAfter is the resync interval of a healthy object (before jitter).
	RequeueAfter time.Duration
	// RequeueAfterOnError is the first retry delay after an error; it doubles
	// per failure up to MaxBackoff.
	RequeueAfterOnError time.Duration
	// JitterFactor lengthens each requeue by a random share in [0, JitterFactor].
	JitterFactor float64
	// MaxConcurrentReconciles is the number of workers per controller.
	MaxConcurrentReconciles int
	// DefaultEnvironment is used for objects without the environment label.
	// Empty means strict: such objects are Blocked until labelled.
	DefaultEnvironment string
	// Environments are the environments whose objects this instance
	// reconciles; empty means every environment (one instance per cluster).
	// An object labelled with another environment is left to the instance
	// that has it: no finalizer, no status, no child of it is written.
	// DefaultEnvironment, when set, must be one of them.
	Environments []string
	// MaxBackoff caps the per-object exponential retry delay.
	MaxBackoff time.Duration
	// StatusMaxWait is the longest a Controller holds back the statuses of
	// an object's passes that change by counts, conditions and messages
	// only (controller.StatusMayWait) while events keep coming; zero means
	// the Controller's default (controller.DefaultStatusMaxWait).
	StatusMaxWait time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		RequeueAfter:            30 * time.Minute,
		RequeueAfterOnError:     time.Second,
		JitterFactor:            0.7,
		MaxConcurrentReconciles: 10,
		DefaultEnvironment:      "",
		MaxBackoff:              5 * time.Minute,
		StatusMaxWait:           time.Second,
	}
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	var errs []error
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", key, d))
		}
	}
	positive(KeyRequeueAfter, c.RequeueAfter)
	positive(KeyRequeueAfterOnError, c.RequeueAfterOnError)
	positive(KeyMaxBackoff, c.MaxBackoff)
	positive(KeyStatusMaxWait, c.StatusMaxWait)
	if !(c.JitterFactor >= 0 && c.JitterFactor <= 1) { // NaN fails both
		errs = append(errs, fmt.Errorf("%s must be within [0,1], got %v", KeyJitterFactor, c.JitterFactor))
	} else if float64(c.RequeueAfter)*(1+c.JitterFactor) >= math.MaxInt64 {
		errs = append(errs, fmt.Errorf("%s (%s) with %s %v must stay under %s", KeyRequeueAfter, c.RequeueAfter, KeyJitterFactor, c.JitterFactor, time.Duration(math.MaxInt64)))
	}
	if c.DefaultEnvironment != "" {
		if msgs := validation.IsValidLabelValue(c.DefaultEnvironment); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q is no valid label value (it is written as the %s label): %s",
				KeyDefaultEnvironment, c.DefaultEnvironment, labels.Environment, strings.Join(msgs, "; ")))
		}
	}
	for _, env := range c.Environments {
		msgs := validation.IsValidLabelValue(env)
		if env == "" {
			msgs = []string{"an environment must not be empty"}
		}
		if len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q is no valid environment (it is matched against the %s label): %s",
				KeyEnvironments, env, labels.Environment, strings.Join(msgs, "; ")))
		}
	}
	if c.DefaultEnvironment != "" && len(c.Environments) > 0 && !slices.Contains(c.Environments, c.DefaultEnvironment) {
		errs = append(errs, fmt.Errorf("%s %q must be one of %s %v: objects without the label belong to it",
			KeyDefaultEnvironment, c.DefaultEnvironment, KeyEnvironments, c.Environments))
	}
	if c.MaxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("%s must be at least 1, got %d", KeyMaxConcurrentReconciles, c.MaxConcurrentReconciles))
	}
	if c.MaxBackoff > 0 && c.RequeueAfterOnError > c.MaxBackoff {
		errs = append(errs, fmt.Errorf("%s (%s) must not exceed %s (%s)", KeyRequeueAfterOnError, c.RequeueAfterOnError, KeyMaxBackoff, c.MaxBackoff))
	}
	return errors.Join(errs...)
}

// AddFlags registers the framework flags, with their defaults, on fs.
func AddFlags(fs *pflag.FlagSet) {
	d := Default()
	fs.Duration(KeyRequeueAfter, d.RequeueAfter, "resync interval of a healthy object, before jitter (env REQUEUE_AFTER)")
	fs.Duration(KeyRequeueAfterOnError, d.RequeueAfterOnError, "first retry delay after an error (env REQUEUE_AFTER_ON_ERROR)")
	fs.Float64(KeyJitterFactor, d.JitterFactor, "requeues are lengthened by a random share in [0, factor] (env JITTER_FACTOR)")
	fs.Int(KeyMaxConcurrentReconciles, d.MaxConcurrentReconciles, "workers per controller (env MAX_CONCURRENT_RECONCILES)")
	fs.String(KeyDefaultEnvironment, d.DefaultEnvironment, "environment of objects without the trustplane.dev/environment label; empty blocks them (env DEFAULT_ENVIRONMENT)")
	fs.String(KeyEnvironments, "", "comma-separated environments whose objects this instance reconciles; empty: every environment, for one instance per cluster (env ENVIRONMENTS)")
	fs.Duration(KeyMaxBackoff, d.MaxBackoff, "cap of the per-object retry backoff (env MAX_BACKOFF)")
	fs.Duration(KeyStatusMaxWait, d.StatusMaxWait, "longest a status that changes by counts and conditions only is held back while events keep coming (env STATUS_MAX_WAIT)")
}

// NewViper returns a viper that reads environment variables named after the
// keys (REQUEUE_AFTER for requeue-after) and the flags of fs, flags winning
// when set explicitly. Operators read their own settings from it too.
func NewViper(fs *pflag.FlagSet) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvKeyReplacer(envKeyReplacer())
	v.AutomaticEnv()
	if fs != nil {
		if err := emptyEnvironment(fs); err != nil {
			return nil, err
		}
		if err := v.BindPFlags(fs); err != nil {
			return nil, fmt.Errorf("bind flags: %w", err)
		}
	}
	return v, nil
}

// envKeyReplacer turns a setting's key into its environment variable,
// which viper then upper-cases (envName).
func envKeyReplacer() *strings.Replacer { return strings.NewReplacer("-", "_") }

// envName is the environment variable of the setting key, as viper reads
// it.
func envName(key string) string {
	return strings.ToUpper(envKeyReplacer().Replace(key))
}

// emptyEnvironment refuses the environment variables of fs's flags that
// are set to the empty string where the flag's default is not empty and
// the flag was not given: such a variable (a chart rendering an unset
// value, say) is neither unset, which would mean the default, nor a
// value; read as one it would turn a duration into 0 or a switch off
// without a word.
func emptyEnvironment(fs *pflag.FlagSet) error {
	var empty []string
	fs.VisitAll(func(f *pflag.Flag) {
		name := envName(f.Name)
		if val, set := os.LookupEnv(name); set && val == "" && f.DefValue != "" && !f.Changed {
			empty = append(empty, fmt.Sprintf("%s (of --%s, default %s)", name, f.Name, f.DefValue))
		}
	})
	if len(empty) == 0 {
		return nil
	}
	return fmt.Errorf("environment variables set to the empty string: %s; unset them for the default or give a value", strings.Join(empty, ", "))
}

// splitList returns the comma-separated items of s, trimmed; an empty s
// has none, while an empty item stays (and fails validation).
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// Reconciles reports whether the instance reconciles objects of
// environment env (see Environments).
func (c Config) Reconciles(env string) bool {
	return len(c.Environments) == 0 || slices.Contains(c.Environments, env)
}

// Load reads the framework settings from v, applying defaults for keys v
// does not know, and validates them.
func Load(v *viper.Viper) (Config, error) {
	d := Default()
	v.SetDefault(KeyRequeueAfter, d.RequeueAfter)
	v.SetDefault(KeyRequeueAfterOnError, d.RequeueAfterOnError)
	v.SetDefault(KeyJitterFactor, d.JitterFactor)
	v.SetDefault(KeyMaxConcurrentReconciles, d.MaxConcurrentReconciles)
	v.SetDefault(KeyDefaultEnvironment, d.DefaultEnvironment)
	v.SetDefault(KeyMaxBackoff, d.MaxBackoff)
	v.SetDefault(KeyStatusMaxWait, d.StatusMaxWait)

	var c Config
	var errs []error
	dur := func(key string) time.Duration {
		s := v.GetString(key)
		out, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration: %w", key, s, err))
		}
		return out
	}
	c.RequeueAfter = dur(KeyRequeueAfter)
	c.RequeueAfterOnError = dur(KeyRequeueAfterOnError)
	c.MaxBackoff = dur(KeyMaxBackoff)
	c.StatusMaxWait = dur(KeyStatusMaxWait)
	var err error
	if c.JitterFactor, err = parseFloat(v.GetString(KeyJitterFactor)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyJitterFactor, err))
	}
	if c.MaxConcurrentReconciles, err = parseInt(v.GetString(KeyMaxConcurrentReconciles)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyMaxConcurrentReconciles, err))
	}
	c.DefaultEnvironment = v.GetString(KeyDefaultEnvironment)
	c.Environments = splitList(v.GetString(KeyEnvironments))
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}
