package charts_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/charts"
	"github.com/trustplane/trustplane/e2e/framework"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// suite is what every test of the package shares: the repository, the tools
// and a real kube-apiserver with etcd.
type suite struct {
	root    string
	helm    string
	kubectl string
	cp      *testenv.ControlPlane
	// flags are each operator's flags, read from its binary's --help.
	flags map[string][]charts.Flag
	// inputs reads the inputs of the subprocesses once, for go test's cache.
	inputs sync.Once
}

// serviceMonitorCRD is prometheus-operator's ServiceMonitor CRD, generated
// from its API types by hack/servicemonitor-crd.sh (source and version in
// the file's header), relative to the repository root.
const serviceMonitorCRD = "e2e/charts/testdata/servicemonitor/monitoring.coreos.com_servicemonitors.yaml"

// env is set once by TestMain before any test runs and only read afterwards.
var env suite

func TestMain(m *testing.M) {
	code, err := setUp(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "charts tests:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setUp(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if env.root, err = framework.RepoRoot(); err != nil {
		return 0, err
	}
	if env.helm, err = testenv.Binary("helm"); err != nil {
		return 0, err
	}
	if env.kubectl, err = testenv.Binary("kubectl"); err != nil {
		return 0, err
	}
	env.flags = map[string][]charts.Flag{}
	for _, o := range operatorimage.Operators() {
		if env.flags[o.Name], err = charts.OperatorFlags(ctx, env.root, o.Name); err != nil {
			return 0, err
		}
	}
	// The ServiceMonitor CRD, so that the chart's ServiceMonitors are
	// applied and validated like its other objects.
	crds := []string{filepath.Join(env.root, serviceMonitorCRD)}
	if env.cp, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{CRDDirectoryPaths: crds}); err != nil {
		return 0, err
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "kube-apiserver log (tail):", tail(env.cp.Logs(), 4000))
	}
	if err := env.cp.Stop(); err != nil {
		return code, err
	}
	return code, nil
}

// readInputs reads every file the tests' subprocesses (helm, kubectl, go
// build, the installers script) read, so that go test's cache sees them: a
// changed template, config file or operator flag reruns the tests instead of
// replaying a cached pass. go test records the files a test opens only once
// the tests run (not in TestMain before m.Run), so run calls it; and it
// rechecks only files inside the test's module, so they are read through
// testdata/repo, a link to the repository root inside this module.
func readInputs() error {
	root, err := filepath.Abs(filepath.Join("testdata", "repo"))
	if err != nil {
		return fmt.Errorf("inputs: %w", err)
	}
	if _, err := os.ReadFile(filepath.Join(root, serviceMonitorCRD)); err != nil {
		return fmt.Errorf("read the tests' inputs: %w", err)
	}
	dirs := []string{charts.Dir, "hack"}
	for _, o := range operatorimage.Operators() {
		dirs = append(dirs, o.Name)
	}
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			if d != charts.Dir && filepath.Ext(p) != ".go" && filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".sh" {
				return nil
			}
			_, err = os.ReadFile(p)
			return err
		})
		if err != nil {
			return fmt.Errorf("read the tests' inputs: %w", err)
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// run runs a command with the admin kubeconfig and returns its standard
// output; a failure carries the standard error.
func run(t *testing.T, stdin []byte, name string, args ...string) ([]byte, error) {
	t.Helper()
	env.inputs.Do(func() {
		if err := readInputs(); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.cp.KubeconfigPath)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr)
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// mustRun is run that fails the test on an error.
func mustRun(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	out, err := run(t, stdin, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chartDir is the chart's absolute path.
func chartDir() string { return filepath.Join(env.root, charts.Dir) }
