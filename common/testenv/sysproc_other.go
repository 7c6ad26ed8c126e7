//go:build !linux

package testenv

import (
	"fmt"
	"runtime"
	"syscall"
)

// childAttr puts a child into its own process group, so that Stop also
// reaches its children. Outside Linux there is no parent-death signal: a
// child of a test process that is killed outright outlives it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// detach is Linux's lazy unmount; the real node runs on Linux only.
func detach(path string) error {
	return fmt.Errorf("unmount %s: lazy unmount is not supported on %s", path, runtime.GOOS)
}

// parentDeathWrapper returns bin: outside Linux there is no parent-death
// signal, so kube-apiserver and etcd outlive a test process killed outright.
func parentDeathWrapper(_, bin string) (string, error) { return bin, nil }
