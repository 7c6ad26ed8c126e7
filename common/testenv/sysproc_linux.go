package testenv

import "syscall"

// childAttr puts a child into its own process group, so that Stop also
// reaches its children, and has the kernel kill it if the test process dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// detach lazily unmounts path: it goes from the namespace now and is freed
// once no longer busy.
func detach(path string) error { return syscall.Unmount(path, syscall.MNT_DETACH) }
