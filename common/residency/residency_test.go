package residency_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/common/residency"
)

// smapsRss sums the Rss the kernel reports in /proc/<pid>/smaps for the
// mappings of the process's executable: an account of the same pages made
// apart from the pagemap's presence bits.
func smapsRss(t *testing.T, pid int) uint64 {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("no /proc here: %v", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total uint64
	ours := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && len(fields) >= 5 {
			ours = len(fields) >= 6 && strings.Join(fields[5:], " ") == exe
			continue
		}
		if ours && fields[0] == "Rss:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// TestTheReportAccountsForEveryResidentPageOfTheExecutable checks the
// report against the kernel's own count and against itself, for the test
// binary (stripped of its symbol table: its functions come from the
// runtime's table) and for a program built with its symbols: the resident
// bytes equal smaps' Rss of the executable's mappings (read before and
// after, as pages may fault in between), the sections add up to them
// exactly, the packages to no more than that, and the code that runs is
// resident.
func TestTheReportAccountsForEveryResidentPageOfTheExecutable(t *testing.T) {
	t.Run("stripped test binary", func(t *testing.T) {
		check(t, os.Getpid(), "github.com/trustplane/trustplane/common/residency", "runtime", "debug/elf")
	})
	t.Run("program with symbols", func(t *testing.T) {
		pid := startProgram(t)
		check(t, pid, "main", "encoding/json", "runtime")
	})
}

// check reports on pid and checks the report; running are packages that
// must have resident bytes.
func check(t *testing.T, pid int, running ...string) {
	t.Helper()
	before := smapsRss(t, pid)
	r, err := residency.Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	after := smapsRss(t, pid)
	if r.Resident < before || r.Resident > after {
		t.Errorf("resident %d bytes, smaps says %d before and %d after", r.Resident, before, after)
	}
	sum := func(shares []residency.Share) (n uint64) {
		for _, s := range shares {
			n += s.Bytes
		}
		return n
	}
	if s := sum(r.Sections); s != r.Resident {
		t.Errorf("sections add up to %d bytes, resident %d: %v", s, r.Resident, r.Sections)
	}
	if m, p := sum(r.Modules), sum(r.Packages); m != p || p > r.Resident || p == 0 {
		t.Errorf("modules add up to %d, packages to %d, resident %d", m, p, r.Resident)
	}
	have := map[string]uint64{}
	for _, p := range r.Packages {
		have[p.Name] = p.Bytes
	}
	for _, pkg := range running {
		if have[pkg] == 0 {
			t.Errorf("package %s runs and has no resident byte: %v", pkg, r.Packages[:min(10, len(r.Packages))])
		}
	}
	for i := 1; i < len(r.Packages); i++ {
		if r.Packages[i].Bytes > r.Packages[i-1].Bytes {
			t.Fatalf("packages are not the largest first: %v", r.Packages[i-1:i+1])
		}
	}
}

// program uses encoding/json, says it is ready, and runs until its
// standard input closes (when the test, or its process, ends).
const program = `package main

import (
	"encoding/json"
	"io"
	"os"
)

func main() {
	b, _ := json.Marshal(map[string]int{"ready": 1})
	os.Stdout.Write(append(b, '\n'))
	io.Copy(io.Discard, os.Stdin)
}
`

// startProgram builds program with its symbols and starts it, stopped
// when the test ends; it returns the process ID once the program is
// ready.
func startProgram(t *testing.T) int {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"main.go": program, "go.mod": "module residencyprobe\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "probe")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "ready") {
		t.Fatalf("the probe did not start: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// TestPackageAndModuleOfSymbols checks the names the report groups by.
func TestPackageAndModuleOfSymbols(t *testing.T) {
	for symbol, want := range map[string]string{
		"k8s.io/api/core/v1.(*Pod).Marshal":                                      "k8s.io/api/core/v1",
		"type:*k8s.io/api/core/v1.Pod":                                           "k8s.io/api/core/v1",
		"go:itab.*k8s.io/api/core/v1.Pod,k8s.io/apimachinery/pkg/runtime.Object": "k8s.io/api/core/v1",
		"runtime.gcBgMarkWorker":                                                 "runtime",
		"main.main":                                                              "main",
		"sigs.k8s.io/controller-runtime/pkg/cache.(*informerCache).Get[go.shape.*k8s.io/api/core/v1.Pod]": "sigs.k8s.io/controller-runtime/pkg/cache",
		"github.com/spf13/viper.New.func1": "github.com/spf13/viper",
		"runtime.text":                     "runtime",
		"go:buildinfo":                     "buildinfo",
	} {
		if got := residency.PackageOf(symbol); got != want {
			t.Errorf("PackageOf(%q) = %q, want %q", symbol, got, want)
		}
	}
	for pkg, want := range map[string]string{
		"k8s.io/api/core/v1":                       "k8s.io/api",
		"github.com/spf13/viper":                   "github.com/spf13/viper",
		"github.com/spf13/viper/internal/encoding": "github.com/spf13/viper",
		"google.golang.org/grpc/internal":          "google.golang.org/grpc",
		"net/http":                                 "std",
		"runtime":                                  "std",
	} {
		if got := residency.ModuleOf(pkg); got != want {
			t.Errorf("ModuleOf(%q) = %q, want %q", pkg, got, want)
		}
	}
}
