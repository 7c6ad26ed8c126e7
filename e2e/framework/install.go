package framework

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// InstallMethod is how the deployed cluster installs the operators
// (E2E_INSTALL).
type InstallMethod string

const (
	// InstallDeploy runs make deploy-<operator> with an overlay of
	// config/default (the default).
	InstallDeploy InstallMethod = "deploy"
	// InstallHelm installs no operator: the images are on the node, and
	// HelmValuesFile gives a spec the values with which charts/trustplane
	// runs them on this cluster.
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
		}
		return nil, nil
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

// HelmValuesFile writes the values with which charts/trustplane, released
// into namespace, runs the operators on this cluster, and registers the
// SPIRE admin entries of the chart's SPIRE clients there. It implements the
// helm specs' target: only in helm mode, where no operator of the
// cluster's own runs.
func (d *Deployed) HelmValuesFile(ctx context.Context, namespace string) (string, error) {
	if d.method != InstallHelm {
		return "", fmt.Errorf("the operators were installed with %s=%s, not %s: a release would run them twice", installMethodEnv, d.method, InstallHelm)
	}
	for _, op := range spireClients {
		if _, err := d.spire.CLI(ctx, "entry", "create", "-admin", "-parentID", d.AgentParentID(),
			"-spiffeID", "spiffe://"+d.td+"/ns/"+namespace+"/sa/"+op,
			"-selector", "k8s:ns:"+namespace, "-selector", "k8s:sa:"+op); err != nil {
			return "", fmt.Errorf("admin entry of %s: %w", op, err)
		}
	}
	api, err := url.Parse(d.cp.Config.Host)
	if err != nil {
		return "", fmt.Errorf("apiserver address %q: %w", d.cp.Config.Host, err)
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
		v := map[string]any{"extraEnv": env}
		switch op {
		case "identity-operator":
			v["flags"] = map[string]any{"parentId": d.AgentParentID()}
		case "bundle-operator":
			// As on the other clusters: specs wait for SPIRE bundle changes.
			v["flags"] = map[string]any{"pollInterval": "2s"}
		}
		values[chartKey(op)] = v
	}
	out, err := yaml.Marshal(values)
	if err != nil {
		return "", err
	}
	path := filepath.Join(d.dir, "helm-values.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

// chartKey is an operator's key in the chart's values (spiffe-operator is
// spiffeOperator).
func chartKey(op string) string {
	first, rest, _ := strings.Cut(op, "-")
	return first + strings.ToUpper(rest[:1]) + rest[1:]
}
