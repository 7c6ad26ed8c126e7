package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControlPlaneOptions configure StartControlPlane.
type ControlPlaneOptions struct {
	// CRDDirectoryPaths are directories or files of CRD manifests to install.
	CRDDirectoryPaths []string
	// Scheme is used by Client; nil means client-go's scheme.
	Scheme *runtime.Scheme
	// APIServerFlags are extra kube-apiserver flags (name without dashes);
	// an empty value removes a flag envtest sets by default.
	APIServerFlags map[string]string
	// BindAddress is the address the kube-apiserver serves on (and names
	// in its serving certificate), 127.0.0.1 by default. Pods on a real
	// node reach the apiserver at the node's IP (NodeIP), never at an
	// address of all interfaces.
	BindAddress string
	// KeepLogs keeps LogDir (logs and kubeconfigs) after Stop; by default
	// Stop removes it, so print Logs() from a failing test before Stop.
	KeepLogs bool
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	// Config is an admin rest.Config.
	Config *rest.Config
	// Client is an uncached admin client with Scheme.
	Client client.Client
	// Scheme is the scheme of Client.
	Scheme *runtime.Scheme
	// KubeconfigPath is an admin kubeconfig file for other processes.
	KubeconfigPath string
	// LogDir holds the kube-apiserver's logs.
	LogDir string

	env      *envtest.Environment
	keepLogs bool

	mu sync.Mutex
	// apiserver is the kube-apiserver RestartAPIServer started, with its
	// command line; nil while envtest's own runs.
	apiserver     *Process
	apiserverArgv []string
}

// StartControlPlane starts kube-apiserver and etcd and installs the CRDs.
func StartControlPlane(opts ControlPlaneOptions) (*ControlPlane, error) {
	assets, err := assetsDir()
	if err != nil {
		return nil, err
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	}
	logDir, err := os.MkdirTemp("", "tp-kube-")
	if err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	logFile, err := os.Create(filepath.Join(logDir, "kube-apiserver.log"))
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    assets,
		DownloadBinaryAssets:     false,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// envtest's launcher sets no parent-death signal: both processes start
	// through a wrapper that does, so they die with the test process.
	apiserverPath, err := parentDeathWrapper(logDir, filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		return nil, err
	}
	etcdPath, err := parentDeathWrapper(logDir, filepath.Join(assets, "etcd"))
	if err != nil {
		return nil, err
	}
	env.ControlPlane.GetAPIServer().Path = apiserverPath
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath}
	env.ControlPlane.GetAPIServer().Out = logFile
	env.ControlPlane.GetAPIServer().Err = logFile
	if opts.BindAddress != "" {
		port, err := FreePortOn(opts.BindAddress)
		if err != nil {
			return nil, err
		}
		serving := &env.ControlPlane.GetAPIServer().SecureServing
		serving.Address, serving.Port = opts.BindAddress, strconv.Itoa(port)
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	if opts.BindAddress != "" {
		args.Set("advertise-address", opts.BindAddress)
	}
	for k, v := range opts.APIServerFlags {
		if v == "" {
			args.Disable(k)
			continue
		}
		args.Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start control plane (logs in %s): %w", logDir, err)
	}
	cp := &ControlPlane{Config: cfg, Scheme: scheme, LogDir: logDir, env: env, keepLogs: opts.KeepLogs}
	if cp.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	if cp.KubeconfigPath, err = cp.WriteKubeconfig("admin", []string{"system:masters"}); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// WriteKubeconfig creates a user authenticated by a client certificate (RBAC
// sees its name and groups; a name of the form
// system:serviceaccount:<namespace>:<name> matches ServiceAccount subjects)
// and writes a kubeconfig for it into LogDir.
func (cp *ControlPlane) WriteKubeconfig(user string, groups []string) (string, error) {
	u, err := cp.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig for %s: %w", user, err)
	}
	path := filepath.Join(cp.LogDir, "kubeconfig-"+sanitize(user))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return path, nil
}

// UserConfig returns a rest.Config for a certificate-authenticated user.
func (cp *ControlPlane) UserConfig(user string, groups []string) (*rest.Config, error) {
	u, err := cp.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", user, err)
	}
	return u.Config(), nil
}

// serviceAccountKeyPath is the private key the apiserver signs service
// account tokens with; kube-controller-manager signs with it too.
func (cp *ControlPlane) serviceAccountKeyPath() string {
	return filepath.Join(cp.env.ControlPlane.APIServer.CertDir, "sa-signer.key")
}

// Logs returns the kube-apiserver log.
func (cp *ControlPlane) Logs() string {
	b, _ := os.ReadFile(filepath.Join(cp.LogDir, "kube-apiserver.log"))
	return string(b)
}

// Stop stops kube-apiserver and etcd (SIGTERM, then SIGKILL after 30s) and
// removes LogDir unless KeepLogs was set.
func (cp *ControlPlane) Stop() error {
	if cp == nil || cp.env == nil {
		return nil
	}
	cp.mu.Lock()
	restarted := cp.apiserver
	cp.mu.Unlock()
	if err := restarted.Stop(30 * time.Second); err != nil {
		return err
	}
	if err := cp.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane (logs kept in %s): %w", cp.LogDir, err)
	}
	if !cp.keepLogs {
		if err := os.RemoveAll(cp.LogDir); err != nil {
			return fmt.Errorf("remove %s: %w", cp.LogDir, err)
		}
	}
	return nil
}

func sanitize(s string) string {
	out := []rune(s)
	for i, r := range out {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			out[i] = '_'
		}
	}
	return string(out)
}
