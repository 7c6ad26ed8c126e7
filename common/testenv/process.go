package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ProcessOptions describe a child process for StartProcess.
type ProcessOptions struct {
	// Name is used in errors.
	Name string
	// Path is the binary; Args its arguments.
	Path string
	Args []string
	// Env is added to the current environment.
	Env []string
	// LogPath receives stdout and stderr (appended).
	LogPath string
	// Credential, when set, is the user and group the process runs as
	// (a server that refuses to run as root).
	Credential *syscall.Credential
}

// Process is a started child process whose output goes to a log file. It
// runs in its own process group and dies with the test process.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// StartProcess starts a child process.
func StartProcess(opts ProcessOptions) (*Process, error) {
	logFile, err := os.OpenFile(opts.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", opts.Name, err)
	}
	cmd := exec.Command(opts.Path, opts.Args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.SysProcAttr = childAttr()
	cmd.SysProcAttr.Credential = opts.Credential
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", opts.Name, err)
	}
	p := &Process{name: opts.Name, cmd: cmd, logPath: opts.LogPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func startProcess(name, logPath, bin string, args ...string) (*Process, error) {
	return StartProcess(ProcessOptions{Name: name, Path: bin, Args: args, LogPath: logPath})
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitError is the error the process ended with (nil while it runs).
func (p *Process) ExitError() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM to the process group and, after timeout, SIGKILL.
func (p *Process) Stop(timeout time.Duration) error {
	if p == nil || p.Exited() {
		return nil
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("%s ignored SIGTERM for %s and was killed", p.name, timeout)
	case <-time.After(10 * time.Second):
		return errors.New(p.name + " did not exit after SIGKILL")
	}
}

// Kill ends the process group at once (SIGKILL), as a crash would, and waits
// for it to exit.
func (p *Process) Kill() error {
	if p == nil || p.Exited() {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New(p.name + " did not exit after SIGKILL")
	}
}

// Logs returns everything the process wrote.
func (p *Process) Logs() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}
