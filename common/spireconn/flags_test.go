package spireconn_test

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/spireconn"
)

func TestLoadDefaultsTheServerID(t *testing.T) {
	t.Setenv("SPIRE_ADDRESS", "spire:8081")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	spireconn.AddFlags(fs)
	if err := fs.Parse([]string{"--workload-api-socket=/run/agent.sock"}); err != nil {
		t.Fatal(err)
	}
	v, err := config.NewViper(fs)
	if err != nil {
		t.Fatal(err)
	}
	o := spireconn.Load(v, "example.org")
	if o.Address != "spire:8081" || o.ServerID != "spiffe://example.org/spire/server" || o.WorkloadAPISocket != "/run/agent.sock" {
		t.Fatalf("options = %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
}
