package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// Versions of the components the harness runs; hack/build-tools.sh builds
// exactly these.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.3"
	SpireVersion      = "v1.13.3"
	// ContainerdVersion, RuncVersion and CNIPluginsVersion are the real
	// node's runtime (hack/build-tools.sh node).
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.3"
	CNIPluginsVersion = "v1.10.0"
	// HelmVersion is the Helm command line the chart tests run
	// (hack/build-tools.sh helm).
	HelmVersion = "v3.22.0"
)

// CacheDir is where hack/build-tools.sh puts the binaries:
// $TRUSTPLANE_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/trustplane.
func CacheDir() string {
	if d := os.Getenv("TRUSTPLANE_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "trustplane")
}

// toolVersions are the built tools by name, with the hack/build-tools.sh
// target that builds each.
var toolVersions = map[string]struct{ version, target string }{
	"kube-apiserver": {KubernetesVersion, "k8s"}, "kubectl": {KubernetesVersion, "k8s"}, "etcd": {EtcdVersion, "k8s"},
	"spire-server": {SpireVersion, "spire"}, "spire-agent": {SpireVersion, "spire"},
	"kubelet": {KubernetesVersion, "node"}, "kube-controller-manager": {KubernetesVersion, "node"},
	"kube-scheduler": {KubernetesVersion, "node"}, "containerd": {ContainerdVersion, "node"},
	"containerd-shim-runc-v2": {ContainerdVersion, "node"}, "ctr": {ContainerdVersion, "node"},
	"runc": {RuncVersion, "node"}, "cni-bridge": {CNIPluginsVersion, "node"},
	"cni-host-local": {CNIPluginsVersion, "node"}, "cni-loopback": {CNIPluginsVersion, "node"},
	"cni-portmap": {CNIPluginsVersion, "node"}, "helm": {HelmVersion, "helm"},
}

// Binary returns the path of a built tool (kube-apiserver, etcd, kubectl,
// spire-server, spire-agent, helm, and the real node's kubelet,
// kube-controller-manager, kube-scheduler, containerd,
// containerd-shim-runc-v2, ctr, runc, cni-<plugin>) or an error that says
// how to build it.
func Binary(name string) (string, error) {
	tool, ok := toolVersions[name]
	if !ok {
		return "", fmt.Errorf("unknown tool %q", name)
	}
	p := filepath.Join(CacheDir(), "bin", name+"-"+tool.version)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s is not built (%s): run hack/build-tools.sh %s or `make tools`", name, tool.version, p, tool.target)
	}
	return p, nil
}

// assetsDir returns a directory with kube-apiserver, etcd and kubectl under
// their plain names, as envtest expects.
func assetsDir() (string, error) {
	dir := filepath.Join(CacheDir(), "assets", "k8s-"+KubernetesVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create assets dir: %w", err)
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		bin, err := Binary(name)
		if err != nil {
			return "", err
		}
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == bin {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(bin, link); err != nil {
			return "", fmt.Errorf("link %s: %w", name, err)
		}
	}
	return dir, nil
}
