package setup

import (
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/config"

	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

func load(t *testing.T, env map[string]string, args ...string) (Settings, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs, _ := Operator().FlagSet()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	v, err := config.NewViper(fs)
	if err != nil {
		t.Fatal(err)
	}
	return Load(v)
}

func TestLoadDefaultsAndOverrides(t *testing.T) {
	s, err := load(t, map[string]string{"TRUST_DOMAIN": "example.org"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ParentID != "spiffe://example.org/k8s-cluster-nodes" {
		t.Errorf("default parent ID = %q", s.ParentID)
	}
	if len(s.Outputs) != 1 || s.Outputs[0] != output.KindSpiffeEntry {
		t.Errorf("default outputs = %v", s.Outputs)
	}
	if s.Handler.TrustDomain != s.TrustDomain || s.Handler.ParentID != s.ParentID {
		t.Errorf("handler options not derived from settings: %+v", s.Handler)
	}
	if s.Handler.MaxSVIDTTL != 24*time.Hour {
		t.Errorf("default max SVID TTL = %s, want 24h", s.Handler.MaxSVIDTTL)
	}
	if s.Handler.PoolMissingGrace != 30*time.Second {
		t.Errorf("default pool missing grace = %s, want 30s", s.Handler.PoolMissingGrace)
	}

	s, err = load(t, map[string]string{"TRUST_DOMAIN": "example.org", "DEFAULT_ENVIRONMENT": "dev"},
		"--output=spiffeentry,clusterspiffeid", "--parent-id=spiffe://example.org/nodes", "--max-svid-ttl=2h", "--pool-missing-grace=0s")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Outputs) != 2 || s.ParentID != "spiffe://example.org/nodes" || s.Framework.DefaultEnvironment != "dev" || s.Handler.MaxSVIDTTL != 2*time.Hour || s.Handler.PoolMissingGrace != 0 {
		t.Errorf("overrides not applied: %+v", s)
	}
}

func TestLoadRejectsInvalidSettings(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		args []string
		want string
	}{
		"missing trust domain":           {nil, nil, KeyTrustDomain},
		"parent in another trust domain": {map[string]string{"TRUST_DOMAIN": "example.org"}, []string{"--parent-id=spiffe://other.org/nodes"}, "not in trust domain"},
		"invalid parent":                 {map[string]string{"TRUST_DOMAIN": "example.org"}, []string{"--parent-id=nope"}, KeyParentID},
		"unknown output":                 {map[string]string{"TRUST_DOMAIN": "example.org"}, []string{"--output=registry"}, "unknown output"},
		"non-positive max SVID TTL":      {map[string]string{"TRUST_DOMAIN": "example.org"}, []string{"--max-svid-ttl=0s"}, KeyMaxSVIDTTL},
		"negative pool missing grace":    {map[string]string{"TRUST_DOMAIN": "example.org"}, []string{"--pool-missing-grace=-1s"}, KeyPoolMissingGrace},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, tc.env, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error mentioning %q, got %v", tc.want, err)
			}
		})
	}
}
