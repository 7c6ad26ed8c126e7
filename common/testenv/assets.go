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

// Binary returns the path of a built tool (kube-apiserver, etcd, kubectl,
// spire-server, spire-agent) or an error that says how to build it.
func Binary(name string) (string, error) {
	version := map[string]string{
		"kube-apiserver": KubernetesVersion, "kubectl": KubernetesVersion,
		"etcd": EtcdVersion, "spire-server": SpireVersion, "spire-agent": SpireVersion,
	}[name]
	if version == "" {
		return "", fmt.Errorf("unknown tool %q", name)
	}
	p := filepath.Join(CacheDir(), "bin", name+"-"+version)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s is not built (%s): run hack/build-tools.sh or `make tools`", name, version, p)
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
