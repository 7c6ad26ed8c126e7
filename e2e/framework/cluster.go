package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Operators are the module directories of the three operators.
var Operators = []string{"spiffe-operator", "identity-operator", "bundle-operator"}

// Namespace is where the operators' service accounts live.
const Namespace = "trustplane-system"

// Cluster is what a spec may use: the cluster through a kubeconfig, SPIRE
// through its API, and the operators' lifecycle.
type Cluster interface {
	// Client is an admin client built from KubeconfigPath.
	Client() client.Client
	// KubeconfigPath is an admin kubeconfig.
	KubeconfigPath() string
	// SpireConn returns a connection to the SPIRE server API.
	SpireConn(ctx context.Context) (*grpc.ClientConn, error)
	// SpireCLI runs the spire-server command with args against the
	// cluster's server (e.g. localauthority x509 prepare) and returns its
	// output.
	SpireCLI(ctx context.Context, args ...string) (string, error)
	// TrustDomain is SPIRE's trust domain.
	TrustDomain() string
	// AgentParentID is the SPIFFE ID entries of workloads in the cluster use as parent.
	AgentParentID() string
	// AgentClusterName is the cluster's name in the SPIRE server's k8s_psat
	// node attestor (agents get spiffe://<td>/spire/agent/k8s_psat/<name>/<node
	// UID>), the --cluster-name spiffe-operator runs with.
	AgentClusterName() string
	// DeployArgs are the make arguments with which `make deploy-<operator>`
	// deploys into this cluster as its operators were deployed (none: the
	// operators' config/default as it is).
	DeployArgs() []string
	// RestartOperator kills an operator abruptly and starts it again.
	RestartOperator(ctx context.Context, name string) error
	// Workloads says how a spec runs pods that ask SPIRE for their
	// identity, or, wrapping ErrNoNode, why this cluster runs none.
	Workloads() (Workloads, error)
	// Diagnostics returns the logs worth printing when a spec fails.
	Diagnostics() string
	// Stop stops everything the Cluster started and removes its files.
	Stop() error
}

// RepoRoot finds the repository root (the directory holding go.work).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory")
		}
		dir = parent
	}
}
