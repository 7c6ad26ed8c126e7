package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Agent is a running spire-agent attested to a Spire server with a join
// token, serving the Workload API on a Unix socket with the unix workload
// attestor.
type Agent struct {
	// ID is the agent's SPIFFE ID (spiffe://<td>/spire/agent/join_token/<token>).
	ID string
	// SocketPath is the Workload API socket.
	SocketPath string
	// Dir holds the configuration, data and logs.
	Dir string

	bin  string
	proc *Process
}

// StartAgent starts a spire-agent against s, bootstrapped with the server's
// bundle (`bundle show`), and waits until it is healthy.
func (s *Spire) StartAgent(ctx context.Context) (*Agent, error) {
	bundle, err := s.BundlePEM(ctx)
	if err != nil {
		return nil, err
	}
	return s.StartAgentWithBundle(ctx, bundle)
}

// StartAgentWithBundle starts a spire-agent against s whose bootstrap trust
// bundle (trust_bundle_path) is bundle, and waits until it is healthy.
func (s *Spire) StartAgentWithBundle(ctx context.Context, bundle string) (*Agent, error) {
	bin, err := Binary("spire-agent")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "tpa")
	if err != nil {
		return nil, fmt.Errorf("agent dir: %w", err)
	}
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
	bundlePath := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundlePath, []byte(bundle), 0o600); err != nil {
		return nil, fmt.Errorf("write agent bundle: %w", err)
	}
	host, port, _ := strings.Cut(s.Address, ":")
	a := &Agent{
		ID:         "spiffe://" + s.TrustDomain + "/spire/agent/join_token/" + token,
		SocketPath: filepath.Join(dir, "agent.sock"),
		Dir:        dir,
		bin:        bin,
	}
	conf := fmt.Sprintf(`agent {
    data_dir = %q
    log_level = "DEBUG"
    server_address = %q
    server_port = %q
    socket_path = %q
    trust_bundle_path = %q
    trust_domain = %q
    join_token = %q
}
plugins {
    NodeAttestor "join_token" {
        plugin_data {}
    }
    KeyManager "memory" {
        plugin_data {}
    }
    WorkloadAttestor "unix" {
        plugin_data {}
    }
}
`, filepath.Join(dir, "data"), host, port, a.SocketPath, bundlePath, s.TrustDomain, token)
	confPath := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("write agent config: %w", err)
	}
	if a.proc, err = startProcess("spire-agent", filepath.Join(dir, "agent.log"), bin, "run", "-config", confPath); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := exec.CommandContext(hctx, bin, "healthcheck", "-socketPath", a.SocketPath).CombinedOutput()
		cancel()
		if err == nil {
			return a, nil
		}
		if a.proc.Exited() || time.Now().After(deadline) {
			_ = a.Stop()
			return nil, fmt.Errorf("spire-agent not healthy: %s\n--- spire-agent log ---\n%s", strings.TrimSpace(string(out)), lastLines(a.proc.Logs(), 40))
		}
		time.Sleep(200 * time.Millisecond) // readiness polling interval
	}
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
