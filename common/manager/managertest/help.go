// Package managertest checks an operator's command from its tests: that
// --help prints the usage and exits 0.
package managertest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// helpEnv tells the re-executed test binary to run the command's main.
const helpEnv = "TRUSTPLANE_MANAGERTEST_HELP"

// ExpectHelp runs main with --help in a child process (the test binary run
// again, from the test named test) and fails t unless it exits 0 and prints
// a usage that names every flag in flags. Call it first thing in that test:
// in the child it runs main and returns.
func ExpectHelp(t *testing.T, test string, main func(), flags ...string) {
	t.Helper()
	if os.Getenv(helpEnv) == "1" {
		os.Args = []string{os.Args[0], "--help"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), helpEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v (want exit 0); output:\n%s", err, out)
	}
	for _, f := range flags {
		if !strings.Contains(string(out), "--"+f) {
			t.Errorf("--help does not name --%s; output:\n%s", f, out)
		}
	}
}
