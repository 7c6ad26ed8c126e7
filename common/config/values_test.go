package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/trustplane/trustplane/common/config"
)

// A jitter factor that is not a number is not within [0, 1] and must be
// refused at startup.
func TestJitterFactorNaNIsRejected(t *testing.T) {
	for _, v := range []string{"NaN", "nan"} {
		t.Run(v, func(t *testing.T) {
			c, err := load(t, nil, map[string]string{"JITTER_FACTOR": v})
			if err == nil {
				t.Fatalf("JITTER_FACTOR=%s accepted: jitter-factor = %v", v, c.JitterFactor)
			}
			if !strings.Contains(err.Error(), config.KeyJitterFactor) {
				t.Fatalf("error %q does not name %s", err, config.KeyJitterFactor)
			}
		})
	}
}

// The same through the flag.
func TestJitterFactorNaNFlagIsRejected(t *testing.T) {
	c, err := load(t, []string{"--jitter-factor=NaN"}, nil)
	if err == nil {
		t.Fatalf("--jitter-factor=NaN accepted: jitter-factor = %v", c.JitterFactor)
	}
}

// A setting given as an empty environment variable is neither unset nor a
// value: it is refused at startup, naming the variable, rather than
// silently becoming the default (or a zero value). A setting whose default
// is itself empty may be given empty.
func TestEmptyEnvironmentVariableIsNotASilentDefault(t *testing.T) {
	for _, key := range []string{"REQUEUE_AFTER", "JITTER_FACTOR", "MAX_CONCURRENT_RECONCILES"} {
		t.Run(key, func(t *testing.T) {
			t.Setenv(key, "")
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			config.AddFlags(fs)
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			_, err := config.NewViper(fs)
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("%s= (empty): error %v, want one naming %s", key, err, key)
			}
		})
	}
	t.Run("a flag given wins", func(t *testing.T) {
		c, err := load(t, []string{"--requeue-after=1m"}, map[string]string{"REQUEUE_AFTER": ""})
		if err != nil || c.RequeueAfter != time.Minute {
			t.Fatalf("--requeue-after=1m with REQUEUE_AFTER empty: %v, %v", c.RequeueAfter, err)
		}
	})
	t.Run("an empty default may be given empty", func(t *testing.T) {
		c, err := load(t, nil, map[string]string{"DEFAULT_ENVIRONMENT": ""})
		if err != nil || c.DefaultEnvironment != "" {
			t.Fatalf("DEFAULT_ENVIRONMENT empty: %q, %v", c.DefaultEnvironment, err)
		}
	})
}

// A default environment that is no valid label value can never be written
// onto a child: it must be refused at startup, naming the setting.
func TestDefaultEnvironmentMustBeAValidLabelValue(t *testing.T) {
	for _, v := range []string{"prod/eu", "prod env", "-prod", strings.Repeat("p", 64)} {
		t.Run(v, func(t *testing.T) {
			_, err := load(t, nil, map[string]string{"DEFAULT_ENVIRONMENT": v})
			if err == nil || !strings.Contains(err.Error(), config.KeyDefaultEnvironment) {
				t.Fatalf("DEFAULT_ENVIRONMENT=%q: error = %v, want one naming %s", v, err, config.KeyDefaultEnvironment)
			}
		})
	}
}

// A requeue interval so long that the jitter added to it overflows a
// time.Duration must be refused (or the jitter bounded): otherwise the
// resync wraps to a negative delay and never happens.
func TestRequeueAfterThatOverflowsWithJitterIsRejected(t *testing.T) {
	c, err := load(t, nil, map[string]string{"REQUEUE_AFTER": "2000000h", "JITTER_FACTOR": "1"})
	if err != nil {
		return
	}
	upper := float64(c.RequeueAfter) * (1 + c.JitterFactor)
	if upper > float64(1<<63-1) {
		t.Fatalf("requeue-after %s with jitter-factor %v accepted; its jittered value %.3g ns overflows a Duration", c.RequeueAfter, c.JitterFactor, upper)
	}
}

// TestEnvironmentsAreReadAndChecked: --environments is a comma-separated
// list of valid label values that must hold the default environment, and
// an instance with none reconciles every environment.
func TestEnvironmentsAreReadAndChecked(t *testing.T) {
	c, err := load(t, []string{"--environments", " prod, staging ", "--default-environment", "prod"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Environments, []string{"prod", "staging"}) || !c.Reconciles("staging") || c.Reconciles("dev") {
		t.Errorf("environments = %q; reconciles staging %v, dev %v", c.Environments, c.Reconciles("staging"), c.Reconciles("dev"))
	}
	if c, err := load(t, nil, nil); err != nil || !c.Reconciles("anything") {
		t.Errorf("without --environments an instance reconciles every environment: %v, %v", c.Environments, err)
	}
	for _, bad := range [][]string{
		{"--environments", "prod,,staging"},
		{"--environments", "Not A Label!"},
		{"--environments", "prod", "--default-environment", "default"},
	} {
		if _, err := load(t, bad, nil); err == nil || !strings.Contains(err.Error(), "environments") {
			t.Errorf("%v: error %v, want one naming environments", bad, err)
		}
	}
}
