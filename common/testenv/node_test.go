package testenv_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
)

// requireNode fails the spec with what the machine lacks, or skips it when
// E2E_NODE=skip says a real node is not expected here.
func requireNode() {
	if err := testenv.NodePreflight(); err != nil {
		if os.Getenv("E2E_NODE") == "skip" {
			Skip("E2E_NODE=skip: " + err.Error())
		}
		Fail(err.Error() + " (set E2E_NODE=skip to skip the specs that need one)")
	}
}

// machineState is what a real node may change on the machine, as text, so
// that a difference prints readably.
func machineState() map[string]string {
	state := map[string]string{}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var mps []string
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			mps = append(mps, f[4])
		}
	}
	sort.Strings(mps)
	state["mounts"] = strings.Join(mps, "\n")
	ifaces, _ := net.Interfaces()
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	sort.Strings(names)
	state["interfaces"] = strings.Join(names, " ")
	for _, pattern := range []string{"/sys/fs/cgroup/*/*", "/run/*", "/var/run/netns/*", "/var/lib/*", "/var/log/*", "/var/log/containers/*", "/etc/cni/*", "/opt/cni/*", "/tmp/tpn/*"} {
		matches, _ := filepath.Glob(pattern)
		var kept []string
		for _, m := range matches {
			if info, err := os.Stat(m); strings.HasPrefix(m, "/sys/fs/cgroup/") && (err != nil || !info.IsDir()) {
				continue // the cgroups, not their files
			}
			if !strings.HasSuffix(m, "/tmp/tpn/lock") {
				kept = append(kept, m)
			}
		}
		state[pattern] = strings.Join(kept, "\n")
	}
	for _, key := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward"} {
		v, _ := os.ReadFile("/proc/sys/" + key)
		state["sysctl "+key] = strings.TrimSpace(string(v))
	}
	state["node processes"] = nodeProcesses()
	// Directories components write to whatever their configuration says.
	for _, dir := range []string{"/var/lib/cni", "/var/lib/kubelet", "/var/lib/containerd", "/var/log/containers", "/var/log/pods",
		"/run/containerd", "/run/netns", "/etc/cni", "/opt/cni", "/etc/containerd", "/etc/kubernetes"} {
		var files []string
		_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				files = append(files, p)
			}
			return nil
		})
		state["tree "+dir] = strings.Join(files, "\n")
	}
	return state
}

// nodeProcesses lists running processes of the node's binaries from the
// tool cache (kubelet, containerd, shims, ...) or of its run directories.
func nodeProcesses() string {
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	cache := filepath.Join(testenv.CacheDir(), "bin")
	var out []string
	for _, p := range procs {
		exe, err := os.Readlink(p)
		if err != nil {
			continue
		}
		for _, tool := range []string{"kubelet", "kube-controller-manager", "kube-scheduler", "containerd", "containerd-shim-runc-v2", "runc"} {
			if strings.HasPrefix(exe, filepath.Join(cache, tool)+"-") {
				out = append(out, exe)
			}
		}
		if strings.HasPrefix(exe, "/tmp/tpn/") {
			out = append(out, exe)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func startNodeControlPlane() *testenv.ControlPlane {
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{APIServerFlags: testenv.NodeAPIServerFlags()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(cp.Stop()).To(Succeed()) })
	return cp
}

// runPod runs a pod of the pause image on the node and waits until it runs.
func runPod(ctx context.Context, c client.Client, name string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: testenv.PauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	// The default service account appears once kube-controller-manager runs.
	Eventually(func() error { return c.Create(ctx, pod) }, 2*time.Minute, time.Second).Should(Succeed())
	Eventually(func() (corev1.PodPhase, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return pod.Status.Phase, err
	}, 3*time.Minute, time.Second).Should(Equal(corev1.PodRunning))
	return pod
}

var _ = Describe("Node", Serial, func() {
	It("runs a pod on a real kubelet, containerd and bridge network, and leaves nothing behind on the machine", func(ctx context.Context) {
		requireNode()
		var before, after map[string]string
		cp := startNodeControlPlane()
		node, err := testenv.StartNode(ctx, cp, testenv.NodeOptions{
			OnLock:   func() { before = machineState() },
			OnUnlock: func() { after = machineState() },
		})
		Expect(err).NotTo(HaveOccurred())
		stopped := false
		DeferCleanup(func() {
			if !stopped {
				GinkgoWriter.Println(node.Diagnostics())
				Expect(node.Stop()).To(Succeed())
			}
		})

		pod := runPod(ctx, cp.Client, "probe")
		_, subnet, err := net.ParseCIDR(node.PodSubnet)
		Expect(err).NotTo(HaveOccurred())
		Expect(subnet.Contains(net.ParseIP(pod.Status.PodIP))).To(BeTrue(), "pod IP %s in %s", pod.Status.PodIP, node.PodSubnet)
		Expect(pod.Status.HostIP).To(Equal(node.IP))
		Expect(machineState()).NotTo(Equal(before), "a running node changes the machine, or the comparison below proves nothing")

		stopped = true
		Expect(node.Stop()).To(Succeed())
		Expect(after).To(Equal(before))
	})

	It("cleans up after a run that ended without Stop, when the next node starts", func(ctx context.Context) {
		requireNode()
		var before, recovered, after map[string]string
		cp := startNodeControlPlane()
		crashed, err := testenv.StartNode(ctx, cp, testenv.NodeOptions{OnLock: func() { before = machineState() }})
		Expect(err).NotTo(HaveOccurred())
		runPod(ctx, cp.Client, "left-behind")
		crashed.SimulateCrash()
		Expect(nodeProcesses()).NotTo(BeEmpty(), "the pod's shim and containers outlive a crash")

		next, err := testenv.StartNode(ctx, cp, testenv.NodeOptions{Name: "tp-node-2",
			OnLock:   func() { recovered = machineState() },
			OnUnlock: func() { after = machineState() },
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(recovered).To(Equal(before), "the next run cleaned up the crashed one before starting")
		Expect(filepath.Glob(crashed.Dir)).To(BeEmpty(), "the crashed run's directory is gone")
		Expect(next.Stop()).To(Succeed())
		Expect(after).To(Equal(before))
	})

	It("says what is missing where it cannot run", func() {
		GinkgoT().Setenv("TRUSTPLANE_CACHE", GinkgoT().TempDir())
		err := testenv.NodePreflight()
		Expect(err).To(MatchError(ContainSubstring("a real node cannot run here")))
		Expect(err).To(MatchError(ContainSubstring("hack/build-tools.sh node")))
		_, err = testenv.StartNode(context.Background(), nil, testenv.NodeOptions{})
		Expect(err).To(MatchError(ContainSubstring("kubelet " + testenv.KubernetesVersion + " is not built")))
	})
})
