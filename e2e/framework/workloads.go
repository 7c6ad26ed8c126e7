package framework

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// DeployProbe runs the svid-probe as the Deployment namespace/name under the
// service account sa (created when missing), with the agent's Workload API
// socket mounted read-only.
func DeployProbe(ctx context.Context, c Cluster, w Workloads, namespace, name, sa string) error {
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: sa}}
	if err := c.Client().Create(ctx, account); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/%s: %w", namespace, sa, err)
	}
	deploy, err := FromYAML(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      serviceAccountName: %[3]s
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: probe
        image: %[4]s
        imagePullPolicy: Never
        env: [{name: SPIFFE_ENDPOINT_SOCKET, value: "unix:///run/spire/sockets/%[5]s"}]
        volumeMounts: [{name: agent, mountPath: /run/spire/sockets, readOnly: true}]
      volumes:
      - name: agent
        hostPath: {path: %[6]s, type: Directory}
`, name, namespace, sa, w.ProbeImage, w.AgentSocketName, w.AgentSocketDir)
	if err != nil {
		return err
	}
	if err := c.Client().Create(ctx, deploy); err != nil {
		return fmt.Errorf("create probe deployment %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ProbeLog returns the log of a running pod of the probe Deployment
// namespace/name.
func ProbeLog(ctx context.Context, c Cluster, namespace, name string) (string, error) {
	pods := &corev1.PodList{}
	if err := c.Client().List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{"app": name}); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return PodLogs(ctx, c, namespace, p.Name)
		}
	}
	return "", fmt.Errorf("no running pod of %s/%s yet", namespace, name)
}

var x509Line = regexp.MustCompile(`(?m)^x509-svid id=(\S+) dns=(\S*) `)

// X509SVIDs lists the X509-SVIDs a probe's log reports, as "<SPIFFE ID>
// dns=<names>".
func X509SVIDs(log string) []string {
	var out []string
	for _, m := range x509Line.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" dns="+m[2])
	}
	return out
}
