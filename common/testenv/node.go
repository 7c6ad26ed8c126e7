package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/image"
)

// PauseImage is the sandbox image of the real node, built from
// common/testenv/pause and imported by StartNode.
const PauseImage = "localhost/trustplane/pause:1"

// pausePackage is the sandbox program, built with the go command from the
// workspace the tests run in.
const pausePackage = "github.com/trustplane/trustplane/common/testenv/pause"

// NodeAPIServerFlags are the kube-apiserver flags a real node needs: the
// Node authorizer for the kubelet, the ServiceAccount admission plugin
// (envtest disables it) so that pods get service-account tokens, and logs
// fetched from the kubelet at the node's InternalIP. Merge them into
// ControlPlaneOptions.APIServerFlags.
func NodeAPIServerFlags() map[string]string {
	return map[string]string{
		"authorization-mode":              "Node,RBAC",
		"disable-admission-plugins":       "",
		"kubelet-preferred-address-types": "InternalIP",
	}
}

// NodeOptions configure StartNode.
type NodeOptions struct {
	// Name is the node's name; default "tp-node".
	Name string
	// Images are image tarballs (common/image.WriteTarball) imported into
	// containerd before the kubelet starts; more can be imported later
	// with ImportImage.
	Images []string
	// LockTimeout is how long to wait for another run's node on this
	// machine to stop; default 15 minutes.
	LockTimeout time.Duration
	// ReadyTimeout bounds the wait for the node to be Ready; default 3 minutes.
	ReadyTimeout time.Duration
	// OnLock, when set, runs once the node holds the machine lock and what
	// earlier runs left behind is cleaned up, before this run changes
	// anything; OnUnlock runs in Stop after everything is undone, before
	// the lock is released. No other run changes the machine in between,
	// so a test can compare the machine in the two.
	OnLock, OnUnlock func()
}

// Node is a real Kubernetes node on this machine, registered with a
// ControlPlane: containerd with runc and bridge CNI, the kubelet, and the
// kube-controller-manager and kube-scheduler that make Deployments into
// running pods. One runs per machine at a time (a lock under /tmp/tpn);
// everything it changes on the machine (processes, mounts, cgroups,
// interfaces, sysctls, files) is recorded before the change and undone by
// Stop, or by the next StartNode when a run ended without Stop.
type Node struct {
	// Name is the node's name.
	Name string
	// IP is the node's InternalIP (the machine's first global IPv4 address).
	IP string
	// Dir holds the run's configuration, state and logs.
	Dir string
	// ContainerdSocket is containerd's API socket.
	ContainerdSocket string
	// KubeletReadOnlyPort serves pods on 127.0.0.1 without authentication,
	// for the SPIRE agent's k8s workload attestor.
	KubeletReadOnlyPort int
	// PodSubnet is the CIDR of the pods' addresses.
	PodSubnet string

	layout *nodeLayout
	state  *runState
	lock   *machineLock
	ctr    string

	onUnlock func()

	mu       sync.Mutex
	procs    map[string]*Process
	stopOnce sync.Once
	stopErr  error
}

// NodePreflight reports what this machine lacks to run a real node (Linux,
// root, cgroup v1, iproute2, the binaries of hack/build-tools.sh node), or
// nil.
func NodePreflight() error {
	var missing []string
	if runtime.GOOS != "linux" {
		missing = append(missing, "Linux (this is "+runtime.GOOS+")")
	} else {
		if os.Geteuid() != 0 {
			missing = append(missing, "root (mounts, cgroups, network namespaces)")
		}
		if h, err := cgroupHierarchies(); err != nil || !hasHierarchies(h, "memory", "cpu", "pids") {
			missing = append(missing, "cgroup v1 hierarchies memory, cpu and pids under /sys/fs/cgroup (cgroup v2 alone is not supported by the harness)")
		}
		if _, err := exec.LookPath("ip"); err != nil {
			missing = append(missing, "the ip command (iproute2)")
		}
	}
	for _, name := range nodeTools {
		if _, err := Binary(name); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a real node cannot run here; missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// nodeTools are the binaries a node runs.
var nodeTools = []string{"kubelet", "kube-controller-manager", "kube-scheduler", "containerd",
	"containerd-shim-runc-v2", "ctr", "runc", "cni-bridge", "cni-host-local", "cni-loopback", "cni-portmap"}

func hasHierarchies(hierarchies []string, names ...string) bool {
	have := map[string]bool{}
	for _, h := range hierarchies {
		for _, c := range strings.Split(filepath.Base(h), ",") {
			have[c] = true
		}
	}
	for _, n := range names {
		if !have[n] {
			return false
		}
	}
	return true
}

// StartNode starts a node against cp, which must run with
// NodeAPIServerFlags, and waits until it is Ready. On error it undoes what
// it did.
func StartNode(ctx context.Context, cp *ControlPlane, opts NodeOptions) (_ *Node, err error) {
	if err := NodePreflight(); err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "tp-node"
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 15 * time.Minute
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	ip, err := NodeIP()
	if err != nil {
		return nil, err
	}
	lock, err := lockMachine(ctx, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: opts.Name, IP: ip, lock: lock, procs: map[string]*Process{}, onUnlock: opts.OnUnlock}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	if err := recoverStaleRuns(); err != nil {
		return nil, fmt.Errorf("a previous real-node run left state behind that could not be cleaned: %w", err)
	}
	if opts.OnLock != nil {
		opts.OnLock()
	}
	if err := n.prepare(); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.importPause(ctx); err != nil {
		return nil, err
	}
	for _, img := range opts.Images {
		if err := n.ImportImage(ctx, img); err != nil {
			return nil, err
		}
	}
	if err := n.startControllers(cp); err != nil {
		return nil, err
	}
	if err := n.startKubelet(cp); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, cp.Client, opts.ReadyTimeout); err != nil {
		return nil, err
	}
	return n, nil
}

// prepare records the run's state, then creates its directory layout,
// cgroups, binary links and configuration.
func (n *Node) prepare() error {
	id, octet, err := runID()
	if err != nil {
		return err
	}
	dir := filepath.Join(nodeRoot, id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	s := &runState{ID: id, Dir: dir, Cgroup: "tpn-" + id, Hierarchies: hierarchies, Bridge: "tpn" + id, Sysctls: map[string]string{}}
	for _, key := range nodeSysctls {
		if v, err := readSysctl(key); err == nil {
			s.Sysctls[key] = v
		}
	}
	s.recordFixedPaths()
	if err := s.save(); err != nil {
		return err
	}
	n.state, n.Dir = s, dir
	if err := s.createCgroups(); err != nil {
		return err
	}
	if n.layout, err = newNodeLayout(dir, octet); err != nil {
		return err
	}
	n.ContainerdSocket, n.KubeletReadOnlyPort, n.PodSubnet = n.layout.containerdSock, n.layout.readOnlyPort, n.layout.subnet
	links := map[string]string{
		filepath.Join(n.layout.bin, "containerd-shim-runc-v2"): "containerd-shim-runc-v2",
		filepath.Join(n.layout.bin, "runc"):                    "runc",
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		links[filepath.Join(n.layout.cniBin, plugin)] = "cni-" + plugin
	}
	for link, tool := range links {
		target, err := Binary(tool)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("link %s: %w", tool, err)
		}
	}
	if n.ctr, err = Binary("ctr"); err != nil {
		return err
	}
	files := map[string]string{
		filepath.Join(dir, "containerd.toml"):                     n.layout.containerdConfig(PauseImage),
		filepath.Join(n.layout.cniConf, "10-trustplane.conflist"): n.layout.cniConfig("tpn-"+id, s.Bridge, n.IP),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// runID is a random run name and the third octet of its pod subnet.
func runID() (string, int, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", 0, fmt.Errorf("random run id: %w", err)
	}
	return hex.EncodeToString(b), int(b[0]), nil
}

// NodeIP is the address a real node on this machine registers as its
// InternalIP: the machine's first global IPv4 address (the kubelet refuses a
// loopback one). Pods reach the host at it through the node's bridge.
func NodeIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || strings.HasPrefix(iface.Name, "tpn") {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("a real node needs a global IPv4 address for the kubelet (it refuses loopback): none found")
}

func (n *Node) start(name, bin string, env []string, args ...string) (*Process, error) {
	p, err := StartProcess(ProcessOptions{Name: name, Path: bin, Args: args, Env: env, LogPath: filepath.Join(n.Dir, name+".log")})
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.procs[name] = p
	n.mu.Unlock()
	return p, nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	bin, err := Binary("containerd")
	if err != nil {
		return err
	}
	// containerd finds its shim on PATH; the shim finds runc from the config.
	env := []string{"PATH=" + n.layout.bin + ":" + os.Getenv("PATH")}
	p, err := n.start("containerd", bin, env, "--config", filepath.Join(n.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	if err := n.state.joinCgroup(p.Pid(), "containerd"); err != nil {
		return err
	}
	return n.waitFor(ctx, "containerd", 60*time.Second, p, func() error {
		_, err := n.ctrRun(ctx, "version")
		return err
	})
}

// waitFor polls check until it succeeds, the process exits or timeout passes.
func (n *Node) waitFor(ctx context.Context, what string, timeout time.Duration, p *Process, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited: %v\n--- %s log ---\n%s", what, p.ExitError(), what, lastLines(p.Logs(), 40))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			msg := fmt.Sprintf("%s not ready after %s: %v", what, timeout, err)
			if p != nil {
				msg += "\n--- " + what + " log ---\n" + lastLines(p.Logs(), 40)
			}
			return errors.New(msg)
		}
		time.Sleep(250 * time.Millisecond) // readiness polling interval
	}
}

func (n *Node) ctrRun(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", n.layout.containerdSock, "--namespace", "k8s.io"}, args...)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, n.ctr, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage imports an image tarball into the node's containerd, where
// the kubelet finds it (pods use imagePullPolicy Never or IfNotPresent).
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	_, err := n.ctrRun(ctx, "images", "import", "--local", tarball)
	return err
}

// importPause builds the sandbox program and imports it as PauseImage.
func (n *Node) importPause(ctx context.Context) error {
	bin := filepath.Join(n.Dir, "pause")
	if err := image.GoBinary(ctx, "", pausePackage, bin); err != nil {
		return fmt.Errorf("build the pause program (run inside the Trustplane workspace): %w", err)
	}
	tar := filepath.Join(n.Dir, "pause.tar")
	spec := image.Spec{Ref: PauseImage, Files: []image.File{{Path: "/pause", Source: bin}}, Entrypoint: []string{"/pause"}, User: "65535:65535"}
	if err := image.WriteTarball(spec, tar); err != nil {
		return err
	}
	return n.ImportImage(ctx, tar)
}

func (n *Node) startControllers(cp *ControlPlane) error {
	caFile := filepath.Join(n.Dir, "ca.crt")
	if err := os.WriteFile(caFile, cp.Config.CAData, 0o600); err != nil {
		return fmt.Errorf("write cluster CA: %w", err)
	}
	kcmConfig, err := cp.WriteKubeconfig("system:kube-controller-manager", nil)
	if err != nil {
		return err
	}
	schedConfig, err := cp.WriteKubeconfig("system:kube-scheduler", nil)
	if err != nil {
		return err
	}
	kcm, err := Binary("kube-controller-manager")
	if err != nil {
		return err
	}
	if _, err := n.start("kube-controller-manager", kcm, nil,
		"--kubeconfig="+kcmConfig, "--authentication-kubeconfig="+kcmConfig, "--authorization-kubeconfig="+kcmConfig,
		"--service-account-private-key-file="+cp.serviceAccountKeyPath(), "--root-ca-file="+caFile,
		"--use-service-account-credentials", "--leader-elect=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", n.layout.kcmPort)); err != nil {
		return err
	}
	sched, err := Binary("kube-scheduler")
	if err != nil {
		return err
	}
	_, err = n.start("kube-scheduler", sched, nil,
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", n.layout.schedulerPort))
	return err
}

func (n *Node) startKubelet(cp *ControlPlane) error {
	kubeconfig, err := cp.WriteKubeconfig("system:node:"+n.Name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	config := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(n.layout.kubeletConfig(n.state.Cgroup, filepath.Join(n.Dir, "ca.crt"))), 0o600); err != nil {
		return fmt.Errorf("write kubelet config: %w", err)
	}
	bin, err := Binary("kubelet")
	if err != nil {
		return err
	}
	// --oom-score-adj 0: without CAP_SYS_RESOURCE the kubelet may not lower its own.
	_, err = n.start("kubelet", bin, nil, "--config="+config, "--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name, "--node-ip="+n.IP, "--root-dir="+n.layout.kubeletRoot,
		"--cert-dir="+filepath.Join(n.layout.kubeletRoot, "pki"), "--oom-score-adj=0", "--v=2")
	return err
}

func (n *Node) waitReady(ctx context.Context, c client.Client, timeout time.Duration) error {
	kubelet := n.process("kubelet")
	return n.waitFor(ctx, "kubelet", timeout, kubelet, func() error {
		for _, name := range []string{"kube-controller-manager", "kube-scheduler", "containerd"} {
			if p := n.process(name); p.Exited() {
				return fmt.Errorf("%s exited: %v\n%s", name, p.ExitError(), lastLines(p.Logs(), 30))
			}
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(n.layout.kubeletHealthz())
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s not Ready: %s", n.Name, cond.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", n.Name)
	})
}

func (n *Node) process(name string) *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.procs[name]
}

// Logs returns a component's log (containerd, kubelet,
// kube-controller-manager, kube-scheduler).
func (n *Node) Logs(component string) string {
	if p := n.process(component); p != nil {
		return p.Logs()
	}
	return ""
}

// Diagnostics returns the last lines of every component's log.
func (n *Node) Diagnostics() string {
	var b strings.Builder
	for _, name := range []string{"kubelet", "containerd", "kube-controller-manager", "kube-scheduler"} {
		fmt.Fprintf(&b, "--- %s (last lines) ---\n%s\n", name, lastLines(n.Logs(name), 40))
	}
	return b.String()
}

// Stop stops the kubelet and the controllers, kills containerd with every
// shim and container, and undoes every change the run made on the
// machine. It is safe to call more than once.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		var errs []error
		for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
			errs = append(errs, n.process(name).Stop(15*time.Second))
		}
		if n.state != nil {
			errs = append(errs, n.state.undo())
		}
		if p := n.process("containerd"); p != nil {
			errs = append(errs, p.Kill())
		}
		if n.onUnlock != nil {
			n.onUnlock()
		}
		n.lock.release()
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}
