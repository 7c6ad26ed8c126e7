package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// childAttr puts a child into its own process group, so that Stop also
// reaches its children, and has the kernel kill it if the test process dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// detach lazily unmounts path: it goes from the namespace now and is freed
// once no longer busy.
func detach(path string) error { return syscall.Unmount(path, syscall.MNT_DETACH) }

// parentDeathWrapper writes into dir a script of bin's name that runs bin
// with the kernel's parent-death signal (SIGKILL) set by setpriv(1), and
// returns its path. A process started through a launcher that sets no
// Pdeathsig (envtest's, for kube-apiserver and etcd) is started through it,
// so that it dies with the test process even when that is killed outright.
func parentDeathWrapper(dir, bin string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return "", fmt.Errorf("setpriv (util-linux), which makes %s die with the test process: %w", filepath.Base(bin), err)
	}
	path := filepath.Join(dir, filepath.Base(bin))
	script := "#!/bin/sh\nexec " + shellQuote(setpriv) + " --pdeathsig KILL -- " + shellQuote(bin) + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("write the wrapper of %s: %w", filepath.Base(bin), err)
	}
	return path, nil
}

// shellQuote quotes s for sh as one word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
