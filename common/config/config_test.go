package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/trustplane/trustplane/common/config"
)

func load(t *testing.T, args []string, env map[string]string) (config.Config, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	v, err := config.NewViper(fs)
	if err != nil {
		t.Fatal(err)
	}
	return config.Load(v)
}

func TestDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Config{RequeueAfter: 30 * time.Minute, RequeueAfterOnError: time.Second, JitterFactor: 0.7,
		MaxConcurrentReconciles: 10, DefaultEnvironment: "", MaxBackoff: 5 * time.Minute, StatusMaxWait: time.Second}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
	if !reflect.DeepEqual(c, config.Default()) {
		t.Fatal("Load with nothing set must equal Default")
	}
}

func TestEnvironmentAndFlagsOverride(t *testing.T) {
	c, err := load(t, []string{"--jitter-factor=0.2", "--status-max-wait=5s"}, map[string]string{
		"REQUEUE_AFTER": "5m", "MAX_CONCURRENT_RECONCILES": "3", "DEFAULT_ENVIRONMENT": "dev", "JITTER_FACTOR": "0.9", "STATUS_MAX_WAIT": "2s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.StatusMaxWait != 5*time.Second {
		t.Fatalf("status-max-wait = %s, want the flag's 5s", c.StatusMaxWait)
	}
	if c.RequeueAfter != 5*time.Minute || c.MaxConcurrentReconciles != 3 || c.DefaultEnvironment != "dev" {
		t.Fatalf("env not applied: %+v", c)
	}
	if c.JitterFactor != 0.2 {
		t.Fatalf("an explicit flag must win over the environment, got %v", c.JitterFactor)
	}
}

func TestInvalidSettingsAreRejected(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		want string
	}{
		"zero requeue":           {map[string]string{"REQUEUE_AFTER": "0s"}, "requeue-after must be positive"},
		"negative error requeue": {map[string]string{"REQUEUE_AFTER_ON_ERROR": "-1s"}, "requeue-after-on-error must be positive"},
		"jitter above one":       {map[string]string{"JITTER_FACTOR": "1.5"}, "jitter-factor must be within [0,1]"},
		"jitter below zero":      {map[string]string{"JITTER_FACTOR": "-0.1"}, "jitter-factor must be within [0,1]"},
		"no workers":             {map[string]string{"MAX_CONCURRENT_RECONCILES": "0"}, "max-concurrent-reconciles must be at least 1"},
		"not a duration":         {map[string]string{"MAX_BACKOFF": "soon"}, `max-backoff: "soon" is not a duration`},
		"not a number":           {map[string]string{"JITTER_FACTOR": "lots"}, "jitter-factor"},
		"not an integer":         {map[string]string{"MAX_CONCURRENT_RECONCILES": "ten"}, "max-concurrent-reconciles"},
		"backoff below first":    {map[string]string{"REQUEUE_AFTER_ON_ERROR": "10m"}, "must not exceed max-backoff"},
		"no status wait":         {map[string]string{"STATUS_MAX_WAIT": "0s"}, "status-max-wait must be positive"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, nil, c.env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}
