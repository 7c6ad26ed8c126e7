package charts_test

// Values the schema accepts that must neither render a broken manager nor
// slip past the checks of TestSettingsTheChartPassesCannotBeShadowed: a
// null default environment, pprof on the probe or metrics port however it
// is spelt or given, and a variable for a flag the chart does not pass.

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A null defaultEnvironment (helm drops the key before the schema check)
// must not render an argument the operators refuse.
func TestANullDefaultEnvironmentPassesNoFlag(t *testing.T) {
	r, err := template(t, "chart-default", nil, "defaultEnvironment=null")
	if err != nil {
		return // refused at install: fine
	}
	for _, op := range []string{"spiffe-operator", "identity-operator", "bundle-operator"} {
		for _, a := range r.argsWithPrefix(t, op, "--default-environment=") {
			v := strings.TrimPrefix(a, "--default-environment=")
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				t.Errorf("%s: defaultEnvironment=null renders %q, which the operator refuses at start: %v", op, a, msgs)
			}
		}
	}
}

// The pprof server on the probe (or metrics) port is the same collision
// as metrics.port == probePort, which the chart now refuses.
func TestPprofOnTheProbePortIsRefused(t *testing.T) {
	for _, addr := range []string{":8081", ":8080"} {
		if _, err := template(t, "chart-default", nil, "spiffeOperator.flags.pprofBindAddress="+addr); err == nil {
			t.Errorf("spiffeOperator.flags.pprofBindAddress=%s renders, on a port the chart gives the probe or metrics server", addr)
		}
	}
}

// With spire.mtls.agentSocketDir "" the chart passes no
// --workload-api-socket (README), so WORKLOAD_API_SOCKET in extraEnv is
// not shadowed and must not fail the install.
func TestWorkloadAPISocketEnvWithoutAnAgentSocketIsAccepted(t *testing.T) {
	sets := []string{"spire.mtls.agentSocketDir="}
	r := mustTemplate(t, "chart-default", nil, sets...)
	if got := r.argsWithPrefix(t, "spiffe-operator", "--workload-api-socket"); len(got) != 0 {
		t.Skipf("the chart passes %q after all", got)
	}
	sets = append(sets, "spiffeOperator.extraEnv[0].name=WORKLOAD_API_SOCKET", "spiffeOperator.extraEnv[0].value=unix:///run/own/agent.sock")
	if _, err := template(t, "chart-default", nil, sets...); err != nil {
		t.Errorf("a variable for a flag the chart does not pass is refused: %v", err)
	}
}

// The pprof port check (flags.pprofBindAddress compared as text) misses a
// port Go's net.Listen reads the same (a leading zero), and the variable
// PPROF_BIND_ADDRESS in extraEnv, which no passed flag shadows.
func TestPprofOnTheProbePortOtherwiseSpeltIsRefused(t *testing.T) {
	for _, sets := range [][]string{
		{"spiffeOperator.flags.pprofBindAddress=:08081"},
		{"spiffeOperator.extraEnv[0].name=PPROF_BIND_ADDRESS", "spiffeOperator.extraEnv[0].value=:8081"},
	} {
		if _, err := template(t, "chart-default", nil, sets...); err == nil {
			t.Errorf("%v renders: pprof on the probe port 8081", sets)
		}
	}
}
