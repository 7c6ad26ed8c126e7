package operator

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/config"
)

// runtimeEnv are variables read by the Go runtime, not flags.
var runtimeEnv = map[string]bool{"GOGC": true, "GOMEMLIMIT": true}

// envFlag returns the flag an environment variable sets (viper's mapping:
// lower case, "-" for "_").
func envFlag(name string) string { return strings.ReplaceAll(strings.ToLower(name), "_", "-") }

// TestManagerSetsOnlyFlagsTheOperatorHas proves that config/manager says
// what the binary reads: every environment variable and argument of the
// manager container is a flag. A renamed flag (--spire-address) would
// otherwise be silently ignored in a deployment.
func TestManagerSetsOnlyFlagsTheOperatorHas(t *testing.T) {
	for _, file := range []string{
		filepath.Join("..", "..", "config", "manager", "manager.yaml"),
		filepath.Join("..", "..", "config", "components", "secret-targets", "manager.yaml"),
		filepath.Join("..", "..", "config", "components", "secret-sources", "manager.yaml"),
	} {
		t.Run(filepath.Base(file), func(t *testing.T) { testManagerSetsOnlyFlags(t, file) })
	}
}

func testManagerSetsOnlyFlags(t *testing.T, file string) {
	fs, _ := Process().FlagSet()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(raw, &d); err != nil {
		t.Fatalf("manager.yaml: %v", err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("manager.yaml has %d containers, want the manager alone", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Env) == 0 {
		t.Fatal("manager.yaml sets no environment; the SPIRE connection is configured there")
	}
	for _, e := range c.Env {
		if !runtimeEnv[e.Name] && fs.Lookup(envFlag(e.Name)) == nil {
			t.Errorf("manager.yaml sets %s, but the operator has no flag --%s", e.Name, envFlag(e.Name))
		}
	}
	for _, a := range c.Args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if fs.Lookup(name) == nil {
			t.Errorf("manager.yaml passes %s, but the operator has no flag --%s", a, name)
		}
	}
}

// TestDocumentedFlagsExistAndOwnFlagsAreDocumented proves that the flags
// in docs/bundle-operator.md are the binary's: every flag named there
// exists, and every flag of the operator (besides the framework's and the
// logger's, documented elsewhere) is named there.
func TestDocumentedFlagsExistAndOwnFlagsAreDocumented(t *testing.T) {
	fs, _ := Process().FlagSet()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "bundle-operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`--([a-z][a-z0-9-]*)").FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`\s--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]] = true
	}
	for name := range documented {
		if fs.Lookup(name) == nil {
			t.Errorf("docs/bundle-operator.md names --%s, which the operator does not have", name)
		}
	}
	frameworkFlags := pflag.NewFlagSet("framework", pflag.ContinueOnError)
	config.AddFlags(frameworkFlags)
	fs.VisitAll(func(f *pflag.Flag) {
		if frameworkFlags.Lookup(f.Name) != nil || strings.HasPrefix(f.Name, "zap-") || f.Name == "kubeconfig" {
			return
		}
		if !documented[f.Name] {
			t.Errorf("flag --%s is not documented in docs/bundle-operator.md", f.Name)
		}
	})
}

// TestSourceNamespaces proves the allowlist of source namespaces: the flag's
// list, or the operator's own namespace when it is empty, none when that is
// unknown, and never a bad name.
func TestSourceNamespaces(t *testing.T) {
	own := func() (string, error) { return "trustplane-system", nil }
	unknown := func() (string, error) { return "", errors.New("not in a pod") }
	cases := []struct {
		flag    string
		own     func() (string, error)
		want    []string
		wantErr bool
	}{
		{"", own, []string{"trustplane-system"}, false},
		{" , ", own, []string{"trustplane-system"}, false},
		{"a, b", own, []string{"a", "b"}, false},
		{"", unknown, nil, false},
		{"Not_A_Namespace", own, nil, true},
	}
	for _, tc := range cases {
		got, err := sourceNamespaces(tc.flag, tc.own)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("sourceNamespaces(%q) = %v, %v; want %v, error %v", tc.flag, got, err, tc.want, tc.wantErr)
		}
	}
}
