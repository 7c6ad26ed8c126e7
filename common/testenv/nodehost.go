package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nodeRoot holds one directory per real-node run and the machine-wide lock.
// It is short, so that socket paths under it stay far below 108 bytes.
const nodeRoot = "/tmp/tpn"

// cgroupRoot is where cgroup v1 hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// containerLogLinks is where the kubelet links container logs, whatever
// its configuration.
const containerLogLinks = "/var/log/containers"

// nodeSysctls are the kernel settings the kubelet and the bridge plugin may
// change; a run records them first and restores them when it ends.
var nodeSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

// runState is what a run changes on the machine, written to run.json before
// the change, so that Stop, or the next run after a crash, can undo it.
type runState struct {
	// ID names the run: its directory, cgroup and bridge.
	ID string `json:"id"`
	// Dir holds everything of the run that lives in files.
	Dir string `json:"dir"`
	// Cgroup is the cgroup (in every v1 hierarchy) that holds the run's
	// containerd, shims and pods.
	Cgroup string `json:"cgroup"`
	// Hierarchies are the cgroup hierarchies the run created Cgroup in.
	Hierarchies []string `json:"hierarchies"`
	// Bridge is the CNI bridge interface.
	Bridge string `json:"bridge"`
	// Sysctls are the values before the run, by /proc/sys path.
	Sysctls map[string]string `json:"sysctls"`
	// Preexisting records which of fixedPaths existed before the run.
	Preexisting map[string]bool `json:"preexisting"`
}

// fixedPaths are what the components write outside the run's directory
// whatever their configuration: the kubelet's container log links and
// device-plugin socket, the CNI library's result cache (containerd offers
// no setting for it), and libmount's runtime directory, which the mount
// command the kubelet runs for tmpfs volumes makes on a machine where
// nothing has mounted with it yet.
var fixedPaths = []string{containerLogLinks, cniCacheDir, "/var/lib/kubelet", kubeletDevicePluginSocket, libmountRuntimeDir}

const (
	cniCacheDir               = "/var/lib/cni"
	kubeletDevicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"
	libmountRuntimeDir        = "/run/mount"
)

// recordFixedPaths notes which fixed paths exist before the run.
func (s *runState) recordFixedPaths() {
	s.Preexisting = map[string]bool{}
	for _, p := range fixedPaths {
		_, err := os.Lstat(p)
		s.Preexisting[p] = err == nil
	}
}

func (s *runState) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode run state: %w", err)
	}
	tmp := filepath.Join(s.Dir, "run.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write run state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "run.json")); err != nil {
		return fmt.Errorf("write run state: %w", err)
	}
	return nil
}

// machineLock is an exclusive lock on the real node of this machine: one
// run at a time changes cgroups, sysctls and interfaces.
type machineLock struct{ f *os.File }

// lockMachine waits up to timeout (or until ctx ends) for the lock.
func lockMachine(ctx context.Context, timeout time.Duration) (*machineLock, error) {
	if err := os.MkdirAll(nodeRoot, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", nodeRoot, err)
	}
	path := filepath.Join(nodeRoot, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &machineLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) || ctx.Err() != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s (another run's real node on this machine?) within %s: %w", path, timeout, err)
		}
		time.Sleep(500 * time.Millisecond) // lock polling interval
	}
}

func (l *machineLock) release() {
	if l != nil && l.f != nil {
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		_ = l.f.Close()
		l.f = nil
	}
}

// recoverStaleRuns undoes what runs that ended without Stop left behind
// (their run.json is still there). The caller holds the machine lock, so
// no such run is alive.
func recoverStaleRuns() error {
	entries, err := os.ReadDir(nodeRoot)
	if err != nil {
		return fmt.Errorf("read %s: %w", nodeRoot, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(nodeRoot, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, "run.json"))
		if err != nil {
			// A run that wrote nothing changed nothing outside its directory.
			errs = append(errs, removeRunDir(dir))
			continue
		}
		var s runState
		if err := json.Unmarshal(data, &s); err != nil || s.Dir != dir {
			errs = append(errs, fmt.Errorf("run state in %s is unreadable (%v): remove it by hand", dir, err))
			continue
		}
		errs = append(errs, s.undo())
	}
	return errors.Join(errs...)
}

// cgroupHierarchies lists the cgroup hierarchies mounted under
// /sys/fs/cgroup: the v1 ones and, on a hybrid system, the cgroup2 one
// (/sys/fs/cgroup/unified), where runc creates the pods' cgroups too.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && (fields[2] == "cgroup" || fields[2] == "cgroup2") && filepath.Dir(fields[1]) == cgroupRoot {
			out = append(out, fields[1])
		}
	}
	sort.Strings(out)
	return out, sc.Err()
}

// createCgroups makes the run's cgroup in every hierarchy; a new cpuset
// cgroup needs its parent's CPUs and memory nodes before it takes tasks.
func (s *runState) createCgroups() error {
	for _, h := range s.Hierarchies {
		dir := filepath.Join(h, s.Cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, file))
				if err != nil {
					return fmt.Errorf("read %s: %w", file, err)
				}
				if err := os.WriteFile(filepath.Join(dir, file), v, 0o644); err != nil {
					return fmt.Errorf("write %s of %s: %w", file, dir, err)
				}
			}
		}
	}
	return nil
}

// joinCgroup moves a process into sub (a child of the run's cgroup) in
// every hierarchy; its children (containerd's shims) stay there too.
func (s *runState) joinCgroup(pid int, sub string) error {
	for _, h := range s.Hierarchies {
		dir := filepath.Join(h, s.Cgroup, sub)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, _ := os.ReadFile(filepath.Join(h, s.Cgroup, file))
				_ = os.WriteFile(filepath.Join(dir, file), v, 0o644)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move %d into %s: %w", pid, dir, err)
		}
	}
	return nil
}

// cgroupPids lists the processes in the run's cgroup tree, in any hierarchy.
func (s *runState) cgroupPids() []int {
	seen := map[int]bool{}
	for _, h := range s.Hierarchies {
		_ = filepath.WalkDir(filepath.Join(h, s.Cgroup), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// killCgroup kills every process of the run's cgroup tree (containerd, its
// shims, every container) until none is left.
func (s *runState) killCgroup(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := s.cgroupPids()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in cgroup %s after %s", pids, s.Cgroup, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond) // wait for the kernel to reap them
	}
}

// removeCgroups removes the run's cgroup tree, innermost first.
func (s *runState) removeCgroups() error {
	var errs []error
	for _, h := range s.Hierarchies {
		top := filepath.Join(h, s.Cgroup)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount decodes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything under dir (volumes, sandbox shm, network
// namespaces, container root filesystems).
func unmountAll(dir string) error {
	for attempt := 0; ; attempt++ {
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		if attempt == 5 {
			return fmt.Errorf("still mounted under %s: %v", dir, mounts)
		}
		for _, m := range mounts {
			if err := syscall.Unmount(m, 0); err != nil {
				_ = detach(m)
			}
		}
	}
}

// removeBridge deletes the run's bridge and the host ends of the veth
// pairs still attached to it.
func (s *runState) removeBridge() error {
	brif := filepath.Join("/sys/class/net", s.Bridge, "brif")
	ports, _ := os.ReadDir(brif)
	var errs []error
	for _, p := range ports {
		errs = append(errs, deleteLink(p.Name()))
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", s.Bridge)); err == nil {
		errs = append(errs, deleteLink(s.Bridge))
	}
	return errors.Join(errs...)
}

func deleteLink(name string) error {
	out, err := exec.Command("ip", "link", "delete", name).CombinedOutput()
	if err != nil {
		if _, statErr := os.Stat(filepath.Join("/sys/class/net", name)); os.IsNotExist(statErr) {
			return nil // gone with its namespace meanwhile
		}
		return fmt.Errorf("ip link delete %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", key))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// restoreSysctls writes back every recorded value that changed.
func (s *runState) restoreSysctls() error {
	var errs []error
	for key, want := range s.Sysctls {
		got, err := readSysctl(key)
		if err != nil || got == want {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s to %s: %w", key, want, err))
		}
	}
	return errors.Join(errs...)
}

// removeFixedPaths removes what the run wrote outside its directory: the
// fixed paths it created, and in those that existed before, its log links
// and CNI results (named after its network, or after its sandboxes for the
// loopback network).
func (s *runState) removeFixedPaths() error {
	var errs []error
	if entries, err := os.ReadDir(containerLogLinks); err == nil {
		for _, e := range entries {
			p := filepath.Join(containerLogLinks, e.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, s.Dir+"/") {
				errs = append(errs, os.Remove(p))
			}
		}
	}
	results := filepath.Join(cniCacheDir, "results")
	if entries, err := os.ReadDir(results); err == nil {
		network := "tpn-" + s.ID + "-"
		for _, e := range entries {
			sandbox, ok := strings.CutPrefix(e.Name(), network)
			if !ok {
				continue
			}
			sandbox, _, _ = strings.Cut(sandbox, "-")
			errs = append(errs, os.Remove(filepath.Join(results, e.Name())))
			if err := os.Remove(filepath.Join(results, "cni-loopback-"+sandbox+"-lo")); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	for i := len(fixedPaths) - 1; i >= 0; i-- {
		p := fixedPaths[i]
		switch {
		case s.Preexisting[p]:
		case p == libmountRuntimeDir:
			// Shared with whatever else mounts on the machine: removed only
			// when empty (the run's mounts are gone by now).
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) && !errors.Is(err, syscall.ENOTEMPTY) {
				errs = append(errs, err)
			}
		default:
			errs = append(errs, os.RemoveAll(p))
		}
	}
	return errors.Join(errs...)
}

// undo reverts everything the run changed, in an order that lets each step
// succeed: processes first, then mounts, interfaces, cgroups, sysctls and
// files.
func (s *runState) undo() error {
	errs := []error{s.killCgroup(30 * time.Second)}
	errs = append(errs, unmountAll(s.Dir))
	errs = append(errs, s.removeBridge(), s.removeCgroups(), s.restoreSysctls(), s.removeFixedPaths())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean up real-node run %s (state kept in %s): %w", s.ID, s.Dir, err)
	}
	return removeRunDir(s.Dir)
}

// removeRunDir removes a run's directory, refusing while anything is
// mounted under it (removing would reach into the mounts).
func removeRunDir(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("not removing %s: still mounted %v", dir, mounts)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
