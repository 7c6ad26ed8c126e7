package testenv

import "testing"

// TestUnescapeMount checks the decoding of mountinfo's octal escapes, which
// a mount point under the run's directory with a space in its name needs to
// be found and unmounted.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/tpn/x/plain`:         "/tmp/tpn/x/plain",
		`/tmp/tpn/x/a\040b`:        "/tmp/tpn/x/a b",
		`/tmp/tpn/x/tab\011end`:    "/tmp/tpn/x/tab\tend",
		`/tmp/tpn/x/back\134slash`: `/tmp/tpn/x/back\slash`,
		`/tmp/tpn/x/not\9octal`:    `/tmp/tpn/x/not\9octal`,
		`/tmp/tpn/x/short\04`:      `/tmp/tpn/x/short\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHasHierarchies(t *testing.T) {
	mounted := []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"}
	if !hasHierarchies(mounted, "memory", "cpu", "pids") {
		t.Error("co-mounted cpu,cpuacct must count as cpu")
	}
	if hasHierarchies(mounted, "memory", "blkio") {
		t.Error("blkio is not mounted")
	}
	if hasHierarchies(nil, "memory") {
		t.Error("no hierarchies (cgroup v2 only) must not pass")
	}
}
