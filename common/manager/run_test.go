package manager_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/common/manager"
)

func testOperator(setupCalled *bool) manager.Operator {
	return manager.Operator{
		Name:     "x-operator",
		AddFlags: func(fs *pflag.FlagSet) { fs.String("own-flag", "d", "the operator's own flag") },
		Scheme:   func() (*runtime.Scheme, error) { return runtime.NewScheme(), nil },
		Setup: func(context.Context, *manager.Process) (func(), error) {
			*setupCalled = true
			return nil, nil
		},
	}
}

func TestRunHelpPrintsEveryFlagAndStops(t *testing.T) {
	var called bool
	var out bytes.Buffer
	if err := manager.Run(context.Background(), testOperator(&called), []string{"--help"}, &out); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"--own-flag", "--requeue-after", "--default-environment", "--metrics-bind-address", "--gc-percent", "--zap-log-level", "--kubeconfig"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("usage lacks %s:\n%s", f, out.String())
		}
	}
	if called {
		t.Fatal("--help must not start the operator")
	}
}

func TestRunRefusesInvalidSettingsBeforeStarting(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":      {"--no-such-flag"},
		"invalid framework": {"--jitter-factor=2"},
		"invalid manager":   {"--kube-api-qps=0"},
	} {
		t.Run(name, func(t *testing.T) {
			var called bool
			err := manager.Run(context.Background(), testOperator(&called), args, &bytes.Buffer{})
			if err == nil || called {
				t.Fatalf("Run(%v) = %v, setup called %v; want an error before setup", args, err, called)
			}
		})
	}
}
