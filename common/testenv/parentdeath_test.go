//go:build linux

package testenv_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// childProcesses returns the processes whose parent is pid, by command name.
func childProcesses(pid int) map[string]int {
	out := map[string]int{}
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, ppid, ok := procStat(p)
		if ok && ppid == pid {
			out[comm] = p
		}
	}
	return out
}

// procStat reads the command name, parent and state of process pid; ok is
// false when it is gone or a zombie (dead, waiting to be reaped).
func procStat(pid int) (comm string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 2 || fields[0] == "Z" || fields[0] == "X" {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	return s[open+1 : end], ppid, true
}

var _ = Describe("A control plane's processes", func() {
	It("die with a test process that is killed outright (SIGKILL)", func(ctx context.Context) {
		dir := GinkgoT().TempDir()
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), childControlPlaneEnv+"="+dir)
		child.Stdout, child.Stderr = GinkgoWriter, GinkgoWriter
		Expect(child.Start()).To(Succeed())
		exited := make(chan struct{})
		go func() {
			_ = child.Wait()
			close(exited)
		}()
		var procs map[string]int
		DeferCleanup(func() {
			// Whatever the outcome, nothing this spec started outlives it.
			_ = child.Process.Kill()
			<-exited
			for _, pid := range procs {
				if _, _, alive := procStat(pid); alive {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
		Eventually(func() error {
			_, err := os.Stat(filepath.Join(dir, "ready"))
			return err
		}, 3*time.Minute, 200*time.Millisecond).Should(Succeed())
		procs = childProcesses(child.Process.Pid)
		Expect(procs).To(HaveKey("kube-apiserver"))
		Expect(procs).To(HaveKey("etcd"))

		Expect(child.Process.Signal(syscall.SIGKILL)).To(Succeed())
		<-exited
		Eventually(func() []string {
			var alive []string
			for name, pid := range procs {
				if comm, _, ok := procStat(pid); ok && comm == name {
					alive = append(alive, name)
				}
			}
			return alive
		}, 30*time.Second, 200*time.Millisecond).Should(BeEmpty(), "processes of the killed test process still run")
	}, SpecTimeout(5*time.Minute))
})
