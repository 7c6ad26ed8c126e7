package testenv_test

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/trustplane/trustplane/common/testenv"
)

// TestMain runs the tests, or, in a test binary started by a spec as its
// child, only what that spec asks of it.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childControlPlaneEnv); dir != "" {
		os.Exit(runChildControlPlane(dir))
	}
	os.Exit(m.Run())
}

// childControlPlaneEnv names the directory in which a test binary started
// as a child (see TestMain) reports its started control plane.
const childControlPlaneEnv = "TESTENV_CHILD_CONTROL_PLANE_DIR"

// runChildControlPlane starts a control plane, writes "ready" into dir and
// waits to be killed: the child side of the spec below.
func runChildControlPlane(dir string) int {
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = cp.Stop()
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	<-term
	_ = cp.Stop()
	return 0
}
