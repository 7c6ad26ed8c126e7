package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Agent is a running spire-agent attested to a Spire server, serving the
// Workload API on a Unix socket: with a join token and the unix workload
// attestor (StartAgent), or as on a Kubernetes node, with k8s_psat and the
// k8s workload attestor (StartK8sAgent).
type Agent struct {
	// ID is the agent's SPIFFE ID, e.g.
	// spiffe://<td>/spire/agent/join_token/<token> or
	// spiffe://<td>/spire/agent/k8s_psat/<cluster>/<node UID>.
	ID string
	// SocketPath is the Workload API socket.
	SocketPath string
	// SocketDir is the directory holding only SocketPath, for a pod's
	// hostPath volume.
	SocketDir string
	// Dir holds the configuration, data and logs.
	Dir string

	bin  string
	proc *Process
}

// K8sAgentOptions configure StartK8sAgent.
type K8sAgentOptions struct {
	// Cluster is the cluster's name, one of the server's PSATClusters.
	Cluster string
	// TokenPath is a projected service-account token with the audience
	// spire-server (Node.ProjectAgentToken writes one).
	TokenPath string
	// NodeName is the kubelet's node.
	NodeName string
	// KubeletReadOnlyPort is where the k8s workload attestor asks the
	// kubelet on 127.0.0.1 for the node's pods.
	KubeletReadOnlyPort int
}

// StartAgent starts a spire-agent attested with a join token, bootstrapped
// with the server's bundle (`bundle show`), and waits until it is healthy.
func (s *Spire) StartAgent(ctx context.Context) (*Agent, error) {
	bundle, err := s.BundlePEM(ctx)
	if err != nil {
		return nil, err
	}
	return s.StartAgentWithBundle(ctx, bundle)
}

// StartAgentWithBundle starts a spire-agent attested with a join token whose
// bootstrap trust bundle (trust_bundle_path) is bundle, and waits until it is
// healthy.
func (s *Spire) StartAgentWithBundle(ctx context.Context, bundle string) (*Agent, error) {
	out, err := s.CLI(ctx, "token", "generate", "-ttl", "3600", "-output", "json")
	if err != nil {
		return nil, err
	}
	var generated struct {
		Value string `json:"value"`
	}
	start := strings.Index(out, "{")
	if start < 0 {
		return nil, fmt.Errorf("no JSON in token output %q", out)
	}
	if err := json.Unmarshal([]byte(out[start:]), &generated); err != nil || generated.Value == "" {
		return nil, fmt.Errorf("parse join token from %q: %v", out, err)
	}
	token := generated.Value
	plugins := `    NodeAttestor "join_token" {
        plugin_data {}
    }
    WorkloadAttestor "unix" {
        plugin_data {}
    }
`
	return s.startAgent(ctx, bundle, fmt.Sprintf("    join_token = %q\n", token), plugins)
}

// StartK8sAgent starts a spire-agent that attests its node with k8s_psat
// and its workloads with the k8s workload attestor (pods by their
// namespace, service account, labels...), and waits until it is healthy.
func (s *Spire) StartK8sAgent(ctx context.Context, opts K8sAgentOptions) (*Agent, error) {
	plugins := fmt.Sprintf(`    NodeAttestor "k8s_psat" {
        plugin_data {
            cluster = %q
            token_path = %q
        }
    }
    WorkloadAttestor "k8s" {
        plugin_data {
            node_name = %q
            kubelet_read_only_port = %d
        }
    }
`, opts.Cluster, opts.TokenPath, opts.NodeName, opts.KubeletReadOnlyPort)
	bundle, err := s.BundlePEM(ctx)
	if err != nil {
		return nil, err
	}
	return s.startAgent(ctx, bundle, "", plugins)
}

// attestedID finds the agent's SPIFFE ID in its log.
var attestedID = regexp.MustCompile(`Node attestation was successful.*spiffe_id="?(spiffe://[^"\s]+)`)

// startAgent starts a spire-agent whose bootstrap trust bundle is bundle,
// with extraAgentLines in its agent block and the given plugins besides the
// key manager.
func (s *Spire) startAgent(ctx context.Context, bundle, extraAgentLines, plugins string) (*Agent, error) {
	bin, err := Binary("spire-agent")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "tpa")
	if err != nil {
		return nil, fmt.Errorf("agent dir: %w", err)
	}
	a := &Agent{SocketDir: filepath.Join(dir, "sock"), Dir: dir, bin: bin}
	a.SocketPath = filepath.Join(a.SocketDir, "agent.sock")
	if err := os.Mkdir(a.SocketDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent socket dir: %w", err)
	}
	bundlePath := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundlePath, []byte(bundle), 0o600); err != nil {
		return nil, fmt.Errorf("write agent bundle: %w", err)
	}
	host, port, _ := strings.Cut(s.Address, ":")
	conf := fmt.Sprintf(`agent {
    data_dir = %q
    log_level = "DEBUG"
    server_address = %q
    server_port = %q
    socket_path = %q
    trust_bundle_path = %q
    trust_domain = %q
%s}
plugins {
    KeyManager "memory" {
        plugin_data {}
    }
%s}
`, filepath.Join(dir, "data"), host, port, a.SocketPath, bundlePath, s.TrustDomain, extraAgentLines, plugins)
	confPath := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("write agent config: %w", err)
	}
	if a.proc, err = startProcess("spire-agent", filepath.Join(dir, "agent.log"), bin, "run", "-config", confPath); err != nil {
		return nil, err
	}
	var out []byte
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var hErr error
		out, hErr = exec.CommandContext(hctx, bin, "healthcheck", "-socketPath", a.SocketPath).CombinedOutput()
		if hErr != nil && a.proc.Exited() {
			return false, fmt.Errorf("spire-agent exited: %v", a.proc.ExitError())
		}
		return hErr == nil, nil
	})
	if err != nil {
		_ = a.Stop()
		return nil, fmt.Errorf("spire-agent not healthy: %s\n--- spire-agent log ---\n%s", strings.TrimSpace(string(out)), lastLines(a.proc.Logs(), 40))
	}
	m := attestedID.FindStringSubmatch(a.proc.Logs())
	if m == nil {
		_ = a.Stop()
		return nil, fmt.Errorf("spire-agent is healthy but its log names no attested ID:\n%s", lastLines(a.proc.Logs(), 40))
	}
	a.ID = m[1]
	return a, nil
}

// Stop stops the agent (SIGTERM, SIGKILL after 15s).
func (a *Agent) Stop() error {
	if a == nil || a.proc == nil {
		return nil
	}
	return a.proc.Stop(15 * time.Second)
}

// Logs returns the agent's log.
func (a *Agent) Logs() string { return a.proc.Logs() }

// Cleanup stops the agent and removes its directory.
func (a *Agent) Cleanup() error {
	err := a.Stop()
	if rmErr := os.RemoveAll(a.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}
