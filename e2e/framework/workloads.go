package framework

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/common/image"
)

// ProbeImage is the image of e2e/cmd/svid-probe that the clusters run.
const ProbeImage = "localhost/trustplane/svid-probe:e2e"

// probePackage is the probe's Go package.
const probePackage = "github.com/trustplane/trustplane/e2e/cmd/svid-probe"

// Workloads is what a spec needs to run pods that ask SPIRE for their
// identity.
type Workloads struct {
	// ProbeImage is present on every node (imagePullPolicy Never).
	ProbeImage string
	// AgentSocketDir is the node's directory that holds the SPIRE agent's
	// Workload API socket, for a hostPath volume.
	AgentSocketDir string
	// AgentSocketName is the socket's name in AgentSocketDir.
	AgentSocketName string
}

// ErrNoNode is wrapped by Workloads when the cluster runs no pods.
var ErrNoNode = errors.New("this cluster runs no pods")

// BuildProbeImage builds svid-probe as a static binary and writes its image
// (running as 65532:65532) as a tarball into dir, and returns its path.
func BuildProbeImage(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "svid-probe")
	if err := image.GoBinary(ctx, root, probePackage, bin); err != nil {
		return "", err
	}
	tar := filepath.Join(dir, "svid-probe.tar")
	spec := image.Spec{
		Ref:        ProbeImage,
		Files:      []image.File{{Path: "/svid-probe", Source: bin}},
		Entrypoint: []string{"/svid-probe"},
		User:       "65532:65532",
	}
	if err := image.WriteTarball(spec, tar); err != nil {
		return "", err
	}
	return tar, nil
}

// PodLogs returns what the pod's container printed, through the apiserver
// (which asks the pod's kubelet), as `kubectl logs` does.
func PodLogs(ctx context.Context, c Cluster, namespace, pod string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		return "", fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("clientset: %w", err)
	}
	out, err := cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s: %w", namespace, pod, err)
	}
	return string(out), nil
}
