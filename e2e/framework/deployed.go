package framework

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// DeployedImageTag tags the operator images the deployed cluster runs.
const DeployedImageTag = "e2e"

// agentSocketMount is where config/manager mounts the agent's socket
// directory in the operators' pods.
const agentSocketMount = "/run/spire/agent-sockets"

// spireClients are the operators that talk to the SPIRE server; each gets an
// admin entry for its pods' service account.
var spireClients = []string{"spiffe-operator", "bundle-operator"}

// Deployed is the local control plane with its real node and SPIRE, where
// the operators run as users run them: as pods from their images (built
// without Docker and imported into the node's containerd), applied by `make
// deploy-<operator>` with an overlay of config/default. They reach the
// apiserver with their service accounts' tokens, so their generated RBAC
// applies, and the spire-server over mTLS with their own X509-SVIDs from the
// agent's Workload API (admin entries), as hack/e2e-kind.sh sets them up.
// The apiserver and the spire-server listen on the node's IP, where the
// pods reach them; no kube-proxy runs, so the overlay gives the pods that
// address instead of a Service's.
type Deployed struct {
	*Local
	overlays string
	method   InstallMethod
	// helmOps are the operators the Helm release runs (helm mode).
	helmOps []string
}

var _ Cluster = &Deployed{}

// StartDeployed starts the cluster and deploys the operators (all three
// unless opts.Operators names some); on error it stops what it started.
func StartDeployed(ctx context.Context, opts LocalOptions) (_ *Deployed, err error) {
	ops := opts.Operators
	if ops == nil {
		ops = Operators
	}
	opts.Operators, opts.RealNode = []string{}, true
	l, err := startLocal(ctx, opts, true)
	if err != nil {
		return nil, err
	}
	d := &Deployed{Local: l, overlays: filepath.Join(l.dir, "deploy")}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Stop())
		}
	}()
	toDeploy, err := d.prepareInstall(ctx, ops)
	if err != nil {
		return nil, err
	}
	for _, op := range toDeploy {
		if err := d.deploy(ctx, op); err != nil {
			return nil, err
		}
	}
	for _, op := range ops {
		if err := d.waitReady(ctx, op, nil, 3*time.Minute); err != nil {
			return nil, err
		}
		l.step("%s running as a pod", op)
	}
	return d, nil
}

// deploy builds and imports op's image, registers its SPIRE admin entry,
// writes its overlay and runs make deploy-<op>.
func (d *Deployed) deploy(ctx context.Context, op string) error {
	image, err := d.importImage(ctx, op)
	if err != nil {
		return err
	}
	if err := d.adminEntry(ctx, op); err != nil {
		return err
	}
	if err := d.writeInstall(op, image); err != nil {
		return err
	}
	d.step("make deploy-%s", op)
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", d.root, "deploy-" + op}, d.DeployArgs()...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.KubeconfigPath())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make deploy-%s: %w\n%s", op, err, out)
	}
	return nil
}

// adminEntry registers the SPIRE admin entry of op's pods (service account
// op in Namespace) if op talks to the SPIRE server.
func (d *Deployed) adminEntry(ctx context.Context, op string) error {
	if !slices.Contains(spireClients, op) {
		return nil
	}
	if _, err := d.spire.CLI(ctx, "entry", "create", "-admin", "-parentID", d.AgentParentID(),
		"-spiffeID", d.OperatorID(op), "-selector", "k8s:ns:"+Namespace, "-selector", "k8s:sa:"+op); err != nil {
		return fmt.Errorf("admin entry of %s: %w", op, err)
	}
	return nil
}

// OperatorID is the SPIFFE ID of an operator's pods.
func (d *Deployed) OperatorID(op string) string {
	return "spiffe://" + d.td + "/trustplane/" + op
}

// writeOverlay writes DEPLOY_OVERLAYS/<op>/kustomization.yaml: op's
// config/default with the imported image, one replica, and the addresses
// of this machine's apiserver, spire-server and agent socket.
func (d *Deployed) writeOverlay(op string, image operatorimage.Operator) error {
	dir := filepath.Join(d.overlays, op)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("overlay of %s: %w", op, err)
	}
	base, err := filepath.Rel(dir, filepath.Join(d.root, op, "config", "default"))
	if err != nil {
		return err
	}
	api, err := url.Parse(d.cp.Config.Host)
	if err != nil {
		return fmt.Errorf("apiserver address %q: %w", d.cp.Config.Host, err)
	}
	env := []map[string]any{
		// In-cluster clients dial KUBERNETES_SERVICE_HOST:PORT; a
		// container's own variables win over the ones the kubelet derives
		// from the kubernetes Service.
		{"name": "KUBERNETES_SERVICE_HOST", "value": api.Hostname()},
		{"name": "KUBERNETES_SERVICE_PORT", "value": api.Port()},
	}
	var patches []any
	container := map[string]any{"name": "manager", "imagePullPolicy": "Never"}
	pod := map[string]any{"containers": []any{container}}
	switch op {
	case "spiffe-operator", "bundle-operator":
		env = append(env,
			map[string]any{"name": "SPIRE_ADDRESS", "value": d.spire.Address},
			map[string]any{"name": "SPIRE_SERVER_ID", "value": d.spire.ServerID},
			map[string]any{"name": "WORKLOAD_API_SOCKET", "value": "unix://" + agentSocketMount + "/" + filepath.Base(d.agent.SocketPath)})
		pod["volumes"] = []any{map[string]any{"name": "spire-agent-socket", "hostPath": map[string]any{"path": d.agent.SocketDir}}}
	}
	switch op {
	case "spiffe-operator":
		env = append(env, map[string]any{"name": "TRUST_DOMAIN", "value": d.td},
			map[string]any{"name": "CLUSTER_NAME", "value": ClusterName})
	case "identity-operator":
		settings, err := identitySettingsPatch(d.td, d.AgentParentID())
		if err != nil {
			return err
		}
		patches = append(patches, settings)
	case "bundle-operator":
		// As on the local cluster: the specs wait for SPIRE bundle changes.
		env = append(env, map[string]any{"name": "POLL_INTERVAL", "value": "2s"})
	}
	container["env"] = env
	patch, err := yaml.Marshal(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": op, "namespace": Namespace},
		"spec":     map[string]any{"replicas": 1, "template": map[string]any{"spec": pod}},
	})
	if err != nil {
		return err
	}
	repo, tag, _ := strings.Cut(image.Ref(DeployedImageTag), ":")
	kustomization, err := yaml.Marshal(map[string]any{
		"resources": []string{base},
		"images":    []any{map[string]any{"name": op, "newName": repo, "newTag": tag}},
		"patches":   append([]any{map[string]any{"target": map[string]any{"kind": "Deployment", "name": op}, "patch": string(patch)}}, patches...),
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), kustomization, 0o644)
}

// DeployArgs implements Cluster: the overlays the operators were deployed
// with. In helm mode none were written, and `make deploy-<operator>` would
// fight the release over its objects: the make-deploy specs do not run
// there (make e2e-helm leaves them out).
func (d *Deployed) DeployArgs() []string { return []string{"DEPLOY_OVERLAYS=" + d.overlays} }

// operatorPods lists the pods of op's Deployment.
func (d *Deployed) operatorPods(ctx context.Context, op string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := d.client.List(ctx, pods, client.InNamespace(Namespace), client.MatchingLabels{"app.kubernetes.io/name": op}); err != nil {
		return nil, fmt.Errorf("pods of %s: %w", op, err)
	}
	return pods.Items, nil
}

// waitReady waits until every replica of op's Deployment is ready and
// updated, with none of the pods named in old left.
func (d *Deployed) waitReady(ctx context.Context, op string, old []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		deploy := &appsv1.Deployment{}
		err := d.client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: op}, deploy)
		if err == nil {
			err = deploymentReady(deploy)
		}
		if err == nil {
			var pods []corev1.Pod
			if pods, err = d.operatorPods(ctx, op); err == nil {
				for _, p := range pods {
					if slices.Contains(old, p.Name) {
						err = fmt.Errorf("pod %s is still there", p.Name)
					}
				}
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w\n%s", op, timeout, err, d.podDiagnostics(op))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond): // readiness polling interval
		}
	}
}

func deploymentReady(d *appsv1.Deployment) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.ReadyReplicas != want || s.Replicas != want {
		return fmt.Errorf("deployment %s: %d replicas wanted, %d updated, %d ready, %d in all",
			d.Name, want, s.UpdatedReplicas, s.ReadyReplicas, s.Replicas)
	}
	return nil
}

// RestartOperator implements Cluster: delete the operator's pods at once
// (the kubelet kills their containers) and wait for their replacements to
// be ready.
func (d *Deployed) RestartOperator(ctx context.Context, op string) error {
	pods, err := d.operatorPods(ctx, op)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("operator %s has no pod", op)
	}
	var old []string
	for i := range pods {
		old = append(old, pods[i].Name)
		if err := d.client.Delete(ctx, &pods[i], client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", pods[i].Name, err)
		}
	}
	return d.waitReady(ctx, op, old, 2*time.Minute)
}

// podDiagnostics describes op's pods and their logs.
func (d *Deployed) podDiagnostics(op string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := d.operatorPods(ctx, op)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "--- pod %s: %s", p.Name, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " (%s ready=%v restarts=%d", c.Name, c.Ready, c.RestartCount)
			if w := c.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if t := c.LastTerminationState.Terminated; t != nil {
				fmt.Fprintf(&b, " last exit %d %s", t.ExitCode, t.Reason)
			}
			b.WriteString(")")
		}
		b.WriteString(" ---\n")
		b.WriteString(d.podEvents(ctx, p.Name))
		if logs, err := PodLogs(ctx, d, Namespace, p.Name); err == nil {
			b.WriteString(tail(logs, 60) + "\n")
		}
	}
	return b.String()
}

// podEvents lists the last events of a pod in Namespace, one a line.
func (d *Deployed) podEvents(ctx context.Context, pod string) string {
	events := &corev1.EventList{}
	if err := d.client.List(ctx, events, client.InNamespace(Namespace), client.MatchingFields{"involvedObject.name": pod}); err != nil {
		return fmt.Sprintf("events of %s: %v\n", pod, err)
	}
	slices.SortFunc(events.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	const last = 10
	if len(events.Items) > last {
		events.Items = events.Items[len(events.Items)-last:]
	}
	var b strings.Builder
	for _, e := range events.Items {
		fmt.Fprintf(&b, "event %s %s %s (x%d): %s\n", eventTime(e).UTC().Format(time.RFC3339), e.Type, e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}

// eventTime is when an event last happened: events.k8s.io writers (the
// scheduler, the kubelet) set eventTime and leave lastTimestamp empty.
func eventTime(e corev1.Event) time.Time {
	if e.LastTimestamp.IsZero() {
		return e.EventTime.Time
	}
	return e.LastTimestamp.Time
}

// Diagnostics implements Cluster: the Helm release's status in helm mode,
// the operators' pods with their recent events and logs, then the local
// cluster's SPIRE and node logs.
func (d *Deployed) Diagnostics() string {
	var b strings.Builder
	if r, err := d.HelmRelease(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := d.Helm(ctx, "status", r.Name, "--namespace", r.Namespace)
		cancel()
		if err != nil {
			out += err.Error() + "\n"
		}
		fmt.Fprintf(&b, "--- helm release %s ---\n%s", r.Name, out)
	}
	for _, op := range Operators {
		fmt.Fprintf(&b, "--- %s ---\n%s", op, d.podDiagnostics(op))
	}
	b.WriteString(d.Local.Diagnostics())
	return b.String()
}

// identitySettingsPatch is the kustomize patch of an overlay of
// identity-operator's config/default that gives it the cluster's trust
// domain and parent: they are in the ConfigMap the admission policy on its
// writes reads too (config/manager/settings.yaml), not in the Deployment.
func identitySettingsPatch(td, parentID string) (map[string]any, error) {
	settings, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "identity-operator-settings", "namespace": Namespace},
		"data":     map[string]any{"TRUST_DOMAIN": td, "PARENT_ID": parentID},
	})
	if err != nil {
		return nil, fmt.Errorf("identity-operator settings: %w", err)
	}
	return map[string]any{"target": map[string]any{"kind": "ConfigMap", "name": "identity-operator-settings"}, "patch": string(settings)}, nil
}
