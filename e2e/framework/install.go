package framework

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// InstallMethod is how the deployed cluster installs the operators
// (E2E_INSTALL).
type InstallMethod string

const (
	// InstallDeploy runs make deploy-<operator> with an overlay of
	// config/default (the default).
	InstallDeploy InstallMethod = "deploy"
	// InstallHelm installs the operators with `helm install` of
	// charts/trustplane, release HelmReleaseName in Namespace, with this
	// cluster's values (Deployed.HelmRelease).
	InstallHelm InstallMethod = "helm"
	// InstallInstaller applies the one-file installers of make installers
	// (hack/installers.sh), with this cluster's settings patched into their
	// Deployments.
	InstallInstaller InstallMethod = "installer"
)

// installMethodEnv names the environment variable choosing the InstallMethod.
const installMethodEnv = "E2E_INSTALL"

// installMethodFromEnv reads E2E_INSTALL; empty is InstallDeploy.
func installMethodFromEnv() (InstallMethod, error) {
	m := InstallMethod(os.Getenv(installMethodEnv))
	switch m {
	case "":
		return InstallDeploy, nil
	case InstallDeploy, InstallHelm, InstallInstaller:
		return m, nil
	}
	return "", fmt.Errorf("%s=%q: want %s, %s or %s", installMethodEnv, m, InstallDeploy, InstallHelm, InstallInstaller)
}

// installerDir is where the installers are written in installer mode.
func (d *Deployed) installerDir() string { return filepath.Join(d.dir, "installers") }

// prepareInstall reads the install method and does what it needs before
// the operators are deployed; it returns the operators still to deploy
// with d.deploy (none in helm mode, where only their images are imported).
func (d *Deployed) prepareInstall(ctx context.Context, ops []string) ([]string, error) {
	method, err := installMethodFromEnv()
	if err != nil {
		return nil, err
	}
	d.method = method
	switch method {
	case InstallHelm:
		for _, op := range ops {
			if _, err := d.importImage(ctx, op); err != nil {
				return nil, err
			}
			if err := d.adminEntry(ctx, op); err != nil {
				return nil, err
			}
		}
		d.helmOps = ops
		if err := d.writeHelmValues(); err != nil {
			return nil, err
		}
		return nil, d.InstallHelmRelease(ctx)
	case InstallInstaller:
		d.step("hack/installers.sh (make installers) with IMAGE_TAG=%s", DeployedImageTag)
		cmd := exec.CommandContext(ctx, filepath.Join(d.root, "hack", "installers.sh"), d.installerDir())
		cmd.Env = append(os.Environ(), "IMAGE_TAG="+DeployedImageTag)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("installers: %w\n%s", err, out)
		}
	}
	return ops, nil
}

// importImage builds op's image and imports it into the node's containerd.
func (d *Deployed) importImage(ctx context.Context, op string) (operatorimage.Operator, error) {
	image, err := operatorimage.Lookup(op)
	if err != nil {
		return image, err
	}
	d.step("building and importing the image of %s", op)
	tar, err := image.Build(ctx, d.root, d.dir, DeployedImageTag)
	if err != nil {
		return image, err
	}
	return image, d.node.ImportImage(ctx, tar)
}

// writeInstall writes what make deploy-<op> applies from DEPLOY_OVERLAYS:
// the overlay of config/default, or in installer mode the same patches of
// op's installer (copied next to its kustomization, as kustomize reads no
// file outside it); the installer names the image already.
func (d *Deployed) writeInstall(op string, image operatorimage.Operator) error {
	if err := d.writeOverlay(op, image); err != nil {
		return err
	}
	if d.method != InstallInstaller {
		return nil
	}
	dir := filepath.Join(d.overlays, op)
	installer, err := os.ReadFile(filepath.Join(d.installerDir(), op+".yaml"))
	if err != nil {
		return fmt.Errorf("installer of %s: %w", op, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "installer.yaml"), installer, 0o644); err != nil {
		return err
	}
	path := filepath.Join(dir, "kustomization.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	k := map[string]any{}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return fmt.Errorf("overlay of %s: %w", op, err)
	}
	k["resources"] = []string{"installer.yaml"}
	delete(k, "images")
	out, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// HelmReleaseName is the release of charts/trustplane in helm mode.
const HelmReleaseName = "trustplane"

// chartDir is the chart's directory, relative to the repository root.
const chartDir = "charts/trustplane"

// HelmRelease is the release through which the deployed cluster runs the
// operators in helm mode.
type HelmRelease struct {
	// Name and Namespace of the release (HelmReleaseName, Namespace).
	Name, Namespace string
	// Chart is the chart's directory.
	Chart string
	// ValuesFile holds the values with which the chart runs the operators
	// on this cluster.
	ValuesFile string
}

// HelmRelease returns the release that runs the operators, or an error
// unless they were installed with E2E_INSTALL=helm.
func (d *Deployed) HelmRelease() (HelmRelease, error) {
	if d.method != InstallHelm {
		return HelmRelease{}, fmt.Errorf("the operators were installed with %s=%s, not with %s=%s", installMethodEnv, d.method, installMethodEnv, InstallHelm)
	}
	return HelmRelease{Name: HelmReleaseName, Namespace: Namespace, Chart: filepath.Join(d.root, chartDir), ValuesFile: d.helmValuesPath()}, nil
}

// InstallHelmRelease runs `helm install` of the release (in helm mode) and
// waits until each of its operators' Deployments is ready.
func (d *Deployed) InstallHelmRelease(ctx context.Context) error {
	r, err := d.HelmRelease()
	if err != nil {
		return err
	}
	d.step("helm install %s %s --namespace %s", r.Name, chartDir, r.Namespace)
	if out, err := d.Helm(ctx, "install", r.Name, r.Chart, "--namespace", r.Namespace, "--create-namespace",
		"--values", r.ValuesFile, "--wait", "--timeout", "5m"); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	for _, op := range d.helmOps {
		if err := d.waitReady(ctx, op, nil, 3*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// Helm runs the helm binary of the tool cache against the cluster and
// returns its combined output.
func (d *Deployed) Helm(ctx context.Context, args ...string) (string, error) {
	helm, err := testenv.Binary("helm")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.KubeconfigPath())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (d *Deployed) helmValuesPath() string { return filepath.Join(d.dir, "helm-values.yaml") }

// writeHelmValues writes the values with which charts/trustplane runs the
// operators on this cluster, as the deploy overlay sets them: the images
// imported into the node's containerd, the SPIRE server over mTLS with
// the agent's Workload API socket, the cluster's name in SPIRE.
func (d *Deployed) writeHelmValues() error {
	api, err := url.Parse(d.cp.Config.Host)
	if err != nil {
		return fmt.Errorf("apiserver address %q: %w", d.cp.Config.Host, err)
	}
	// No kube-proxy runs: the pods dial the apiserver at the node's IP.
	env := []any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": api.Hostname()},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": api.Port()},
	}
	values := map[string]any{
		"trustDomain": d.td,
		"image":       map[string]any{"tag": DeployedImageTag, "pullPolicy": "Never"},
		"spire": map[string]any{
			"mode":        "mtls",
			"serverID":    d.spire.ServerID,
			"clusterName": ClusterName,
			"mtls": map[string]any{
				"address":         d.spire.Address,
				"agentSocketDir":  d.agent.SocketDir,
				"agentSocketName": filepath.Base(d.agent.SocketPath),
			},
		},
	}
	for _, op := range Operators {
		v := map[string]any{"enabled": slices.Contains(d.helmOps, op), "extraEnv": env}
		switch op {
		case "identity-operator":
			v["flags"] = map[string]any{"parentId": d.AgentParentID()}
			// The specs create workloads with the variant label as the
			// admin (group system:masters): the policy's default group and
			// that one may, as a platform team adds its deployers.
			v["admissionPolicies"] = map[string]any{"allowedGroups": "trustplane:identity-boundary-setters,system:masters"}
		case "bundle-operator":
			// As on the other clusters: specs wait for SPIRE bundle changes.
			v["flags"] = map[string]any{"pollInterval": "2s"}
		}
		values[chartKey(op)] = v
	}
	out, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	return os.WriteFile(d.helmValuesPath(), out, 0o644)
}

// chartKey is an operator's key in the chart's values (spiffe-operator is
// spiffeOperator).
func chartKey(op string) string {
	first, rest, _ := strings.Cut(op, "-")
	return first + strings.ToUpper(rest[:1]) + rest[1:]
}
