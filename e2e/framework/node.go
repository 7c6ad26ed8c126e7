package framework

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/trustplane/trustplane/common/testenv"
)

// ClusterName is the local cluster's name in SPIRE: agents attested by
// k8s_psat get spiffe://<td>/spire/agent/k8s_psat/<ClusterName>/<node UID>
// and the selector k8s_psat:cluster:<ClusterName>.
const ClusterName = "local"

// startNode runs the real node with the probe image, the SPIRE agent as a
// Kubernetes node runs it (k8s_psat with a projected token, the k8s workload
// attestor), and the node alias every workload entry hangs under.
func (l *Local) startNode(ctx context.Context) (err error) {
	l.step("building the svid-probe image")
	probe, err := BuildProbeImage(ctx, l.root, l.dir)
	if err != nil {
		return err
	}
	l.step("starting the real node (containerd, kubelet, kube-controller-manager, kube-scheduler)")
	if l.node, err = testenv.StartNode(ctx, l.cp, testenv.NodeOptions{Images: []string{probe}}); err != nil {
		return err
	}
	l.step("starting spire-agent (k8s_psat, k8s workload attestor)")
	token := filepath.Join(l.dir, "agent-token")
	if err := l.node.ProjectAgentToken(ctx, l.cp.Client, token); err != nil {
		return err
	}
	if l.agent, err = l.spire.StartK8sAgent(ctx, testenv.K8sAgentOptions{
		Cluster: ClusterName, TokenPath: token, NodeName: l.node.Name, KubeletReadOnlyPort: l.node.KubeletReadOnlyPort,
	}); err != nil {
		return err
	}
	if _, err := l.spire.CLI(ctx, "entry", "create", "-node", "-spiffeID", l.AgentParentID(),
		"-selector", "k8s_psat:cluster:"+ClusterName); err != nil {
		return fmt.Errorf("node alias entry: %w", err)
	}
	l.step("real node %s ready; agent %s", l.node.Name, l.agent.ID)
	return nil
}

// Workloads implements Cluster: the real node's, or why there is none.
func (l *Local) Workloads() (Workloads, error) {
	if l.node == nil {
		return Workloads{}, fmt.Errorf("%w: %v", ErrNoNode, l.noNode)
	}
	return Workloads{ProbeImage: ProbeImage, AgentSocketDir: l.agent.SocketDir, AgentSocketName: filepath.Base(l.agent.SocketPath)}, nil
}
