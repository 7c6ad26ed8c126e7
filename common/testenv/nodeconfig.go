package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// nodeLayout is where a run keeps each component's files and which ports
// it uses; everything is per run.
type nodeLayout struct {
	dir             string
	bin             string // plain-named links: containerd-shim-runc-v2, runc
	cniBin          string // plain-named links: bridge, host-local, loopback, portmap
	containerdSock  string
	containerdRoot  string
	containerdState string
	kubeletRoot     string
	podLogs         string
	cniConf         string
	cniData         string
	subnet          string // /24 of the pods
	kubeletPort     int
	readOnlyPort    int
	healthzPort     int
	kcmPort         int
	schedulerPort   int
}

func newNodeLayout(dir string, subnetOctet int) (*nodeLayout, error) {
	l := &nodeLayout{
		dir:             dir,
		bin:             filepath.Join(dir, "bin"),
		cniBin:          filepath.Join(dir, "cni-bin"),
		containerdSock:  filepath.Join(dir, "c.sock"),
		containerdRoot:  filepath.Join(dir, "containerd"),
		containerdState: filepath.Join(dir, "cs"),
		kubeletRoot:     filepath.Join(dir, "kubelet"),
		podLogs:         filepath.Join(dir, "pod-logs"),
		cniConf:         filepath.Join(dir, "cni"),
		cniData:         filepath.Join(dir, "cni-data"),
		subnet:          fmt.Sprintf("10.88.%d.0/24", subnetOctet),
	}
	for _, p := range []*int{&l.kubeletPort, &l.readOnlyPort, &l.healthzPort, &l.kcmPort, &l.schedulerPort} {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		*p = port
	}
	for _, d := range []string{l.bin, l.cniBin, l.containerdRoot, l.containerdState, l.kubeletRoot, l.podLogs, l.cniConf, l.cniData} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	return l, nil
}

// containerdConfig is containerd's configuration (version 3): every path
// under the run's directory, the runc shim with runc from the cache, CNI
// from the cache, and no plugin that reaches outside (NRI, CDI, tracing).
func (l *nodeLayout) containerdConfig(pauseImage string) string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = %q

[plugins."io.containerd.shim.v1.manager"]
  socket_dir = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = false
  cdi_spec_dirs = []
  # Without CAP_SYS_RESOURCE no process may lower its OOM score below containerd's.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, l.containerdRoot, l.containerdState, l.containerdSock, l.containerdSock+".ttrpc", filepath.Join(l.dir, "cd.sock"),
		filepath.Join(l.dir, "s"), pauseImage, filepath.Join(l.bin, "runc"), filepath.Join(l.dir, "runc"),
		l.cniBin, l.cniConf)
}

// cniConfig is a bridge network with host-local addresses, no masquerade
// (nothing leaves the machine) and the loopback interface. Pods have no
// default route: besides their subnet they reach only nodeIP, through the
// bridge's gateway address, where servers meant for pods listen. The portmap
// plugin is built but not chained: it needs iptables, which the machine may
// lack, and no spec maps host ports.
func (l *nodeLayout) cniConfig(network, bridge, nodeIP string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": %q}], "dataDir": %q}},
    {"type": "loopback"}
  ]
}
`, network, bridge, l.subnet, nodeIP+"/32", l.cniData)
}

// kubeletConfig is the kubelet's configuration. Its API is open to anyone
// on this machine (anonymous, AlwaysAllow): the read-only port is what the
// SPIRE agent's k8s workload attestor asks for pods.
func (l *nodeLayout) kubeletConfig(cgroup, caFile string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: %d
readOnlyPort: %d
healthzPort: %d
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: %q
podLogsDir: %q
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
`, l.kubeletPort, l.readOnlyPort, l.healthzPort, caFile, "/"+cgroup, "unix://"+l.containerdSock, l.podLogs)
}

func (l *nodeLayout) kubeletHealthz() string {
	return "http://127.0.0.1:" + strconv.Itoa(l.healthzPort) + "/healthz"
}
