package charts

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/trustplane/trustplane/common/image"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// Flag is one command-line flag of an operator, as its --help lists it.
type Flag struct {
	// Name is the flag without dashes, e.g. requeue-after.
	Name string
	// Type is pflag's type name (duration, string, strings, int, int32,
	// float, float32, level, encoder, time-encoding); empty for a bool.
	Type string
	// Default is the default --help shows, empty when it shows none.
	Default string
	// Usage is the help text without the default and the (env ...) note.
	Usage string
}

// helpLine matches a flag line of pflag's usage: "  --name type   usage".
var helpLine = regexp.MustCompile(`^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)(?: ([a-z0-9-]+))?\s{2,}(.*)$`)

// envNote is the "(env NAME)" remark of a usage, which the chart has no use for.
var envNote = regexp.MustCompile(`\s*\(env [^)]*\)`)

// ParseHelp reads the flags out of the --help output of an operator.
func ParseHelp(help string) ([]Flag, error) {
	var flags []Flag
	for _, line := range strings.Split(help, "\n") {
		m := helpLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := Flag{Name: m[1], Type: m[2], Usage: m[3]}
		if i := strings.LastIndex(f.Usage, " (default "); i >= 0 && strings.HasSuffix(f.Usage, ")") {
			f.Default = strings.Trim(f.Usage[i+len(" (default "):len(f.Usage)-1], `"`)
			f.Usage = f.Usage[:i]
		}
		f.Usage = strings.TrimSpace(envNote.ReplaceAllString(f.Usage, ""))
		flags = append(flags, f)
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("no flags in the help output:\n%s", help)
	}
	return flags, nil
}

// OperatorFlags builds the operator's binary from root/<operator> and
// returns the flags its --help lists: the binary is the source of truth of
// what can be configured.
func OperatorFlags(ctx context.Context, root, operator string) ([]Flag, error) {
	work, err := os.MkdirTemp("", "tp-flags-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, operator)
	if err := image.GoBinary(ctx, filepath.Join(root, operator), operatorimage.Package, bin); err != nil {
		return nil, fmt.Errorf("%s: %w", operator, err)
	}
	// --help makes pflag print the usage and return an error: the exit
	// status says nothing, the output does.
	out, _ := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	flags, err := ParseHelp(string(out))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", operator, err)
	}
	return flags, nil
}

// ChartSet says how the chart sets a flag that is not under
// <operator>.flags, keyed by flag name; the value names the chart value
// that decides it.
var ChartSet = map[string]string{
	"trust-domain":              "trustDomain",
	"cluster-name":              "spire.clusterName",
	"spire-address":             "spire.mtls.address",
	"spire-server-id":           "spire.serverID",
	"workload-api-socket":       "spire.mtls.agentSocketDir, spire.mtls.agentSocketName",
	"spire-socket":              "spire.socket.hostPath, spire.socket.name",
	"leader-elect":              "<operator>.leaderElection",
	"leader-election-namespace": "the release namespace",
	"metrics-bind-address":      "<operator>.metrics.port",
	"health-probe-bind-address": "<operator>.probePort",
	"kubeconfig":                "never: the operator runs in the cluster",
}

// ValueFlags are the flags of an operator that are values under
// <operator>.flags: every flag the chart does not set itself.
func ValueFlags(flags []Flag) []Flag {
	var out []Flag
	for _, f := range flags {
		if _, ok := ChartSet[f.Name]; !ok {
			out = append(out, f)
		}
	}
	return out
}

// ValueKey is the key of a flag under <operator>.flags: the flag name in
// lower camel case (requeue-after is requeueAfter). The chart turns it back
// with Sprig's kebabcase.
func ValueKey(flag string) string {
	parts := strings.Split(flag, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
