package operator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

// An operator setting whose environment variable is set to the empty string
// (as a chart renders an unset value) is either refused with an error naming
// it, or left at its default: it never silently becomes the zero value, which
// would turn off orphan collection or remove the SPIRE call timeout.
func TestEmptyEnvironmentVariableNeverSilentlyZeroesASetting(t *testing.T) {
	for _, c := range []struct {
		env   string
		check func(o operator.Options) bool
	}{
		{"COLLECT_ORPHANS", func(o operator.Options) bool { return o.CollectOrphans }},
		{"SPIRE_RPC_TIMEOUT", func(o operator.Options) bool { return o.RPCTimeout == 30*time.Second }},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(c.env, "")
			fs := pflag.NewFlagSet("spiffe-operator", pflag.ContinueOnError)
			operator.AddFlags(fs)
			if err := fs.Parse([]string{"--spire-socket=/run/spire/api.sock"}); err != nil {
				t.Fatal(err)
			}
			v, err := config.NewViper(fs)
			if err != nil {
				if !strings.Contains(err.Error(), c.env) {
					t.Fatalf("%s set empty: refused with %v, which does not name it", c.env, err)
				}
				return // refused, naming the variable
			}
			o, err := operator.Load(v)
			if err != nil {
				return // refused: a clear error
			}
			if !c.check(o) {
				t.Fatalf("%s set empty: loaded without error, and the setting lost its default (CollectOrphans=%v RPCTimeout=%v)",
					c.env, o.CollectOrphans, o.RPCTimeout)
			}
		})
	}
}
