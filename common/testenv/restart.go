package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// RestartAPIServer kills the kube-apiserver (SIGKILL, as a crash would) and
// starts it again with the same flags, certificates and port on the same
// etcd, whose data is kept; it returns once the new one is ready. Clients
// and kubeconfigs stay valid.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var argv []string
	if cp.apiserver != nil {
		argv = cp.apiserverArgv
		if err := cp.apiserver.Kill(); err != nil {
			return err
		}
	} else {
		pid, args, err := findProcess("kube-apiserver", cp.env.ControlPlane.APIServer.CertDir)
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill kube-apiserver %d: %w", pid, err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return !processAlive(pid), nil
		}); err != nil {
			return fmt.Errorf("kube-apiserver %d did not exit after SIGKILL: %w", pid, err)
		}
		argv = args
	}
	// The killed server's side of connections that peers keep open (a
	// stopped process never closes its side) holds the port for a while.
	if err := waitListenable(ctx, listenAddress(argv), 2*time.Minute); err != nil {
		return err
	}
	p, err := StartProcess(ProcessOptions{Name: "kube-apiserver", Path: argv[0], Args: argv[1:],
		LogPath: filepath.Join(cp.LogDir, "kube-apiserver.log")})
	if err != nil {
		return err
	}
	cp.apiserver, cp.apiserverArgv = p, argv
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("kube-apiserver exited after restart: %v", p.ExitError())
		}
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready after restart: %w", err)
	}
	return nil
}

// listenAddress is the host:port a kube-apiserver command line serves on.
func listenAddress(argv []string) string {
	host, port := "127.0.0.1", "6443"
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--bind-address="); ok && v != "0.0.0.0" && v != "" {
			host = v
		}
		if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
			port = v
		}
	}
	return net.JoinHostPort(host, port)
}

// waitListenable waits until a listener can bind addr.
func waitListenable(ctx context.Context, addr string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			last = err
			return false, nil
		}
		return true, l.Close()
	})
	if err != nil {
		return fmt.Errorf("port of the kube-apiserver still taken after %s: %w (%w)", timeout, err, last)
	}
	return nil
}

// findProcess returns the PID and command line of the one running process
// whose binary's name is name and whose arguments mention marker.
func findProcess(name, marker string) (int, []string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		if filepath.Base(argv[0]) != name || !strings.Contains(string(raw), marker) {
			continue
		}
		return pid, argv, nil
	}
	return 0, nil, errors.New("no running " + name + " with " + marker)
}

// processAlive reports whether pid names a process that has not exited
// (a zombie counts as exited).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}
