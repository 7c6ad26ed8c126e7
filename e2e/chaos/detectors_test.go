package chaos

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

// The detectors must be able to fail: each is fed a history that breaks
// its invariant and one that does not.

func TestNonLeaderWrites(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	a := &auditLog{renewals: map[string][]write{
		"op": {{At: at(0), Replica: "op-0"}, {At: at(2), Replica: "op-0"}, {At: at(4), Replica: "op-0"},
			// op-0 paused at 4s; op-1 takes the lease after it expired.
			{At: at(20), Replica: "op-1"}, {At: at(22), Replica: "op-1"}},
		"lone": {{At: at(0), Replica: "lone-0"}},
	}}
	a.writes = []write{
		{At: at(3), Replica: "op-0", Target: "ok: leader"},
		{At: at(21), Replica: "op-1", Target: "ok: new leader"},
		{At: at(20.5), Replica: "op-0", Target: "ok: within the margin of the hand-over"},
		{At: at(23), Replica: "op-0", Target: "bad: woke up"},
		{At: at(-1), Replica: "op-1", Target: "bad: before any lease"},
		{At: at(30), Replica: "lone-0", Target: "bad: expired"},
	}
	spire := []write{
		{At: at(19), Replica: "op-0", Target: "ok: SPIRE write in the second the lease ran out", Resolution: time.Second},
		{At: at(21), Replica: "op-0", Target: "bad: SPIRE write after the hand-over", Resolution: time.Second},
		{At: at(20), Replica: "op-1", Target: "ok: SPIRE write in the second of the take-over", Resolution: time.Second},
	}
	opOf := func(r string) string { return r[:strings.LastIndex(r, "-")] }
	n, bad := a.nonLeaderWrites(opOf, spire)
	if n != 9 {
		t.Errorf("checked %d writes, want 9", n)
	}
	if len(bad) != 4 {
		t.Errorf("got %d violations, want 4: %q", len(bad), bad)
	}
	for _, b := range bad {
		if !strings.Contains(b, "bad:") {
			t.Errorf("violation of a legal write: %s", b)
		}
	}
	for _, want := range []string{"while op-1 held", "before any lease", "after its last renewal"} {
		found := false
		for _, b := range bad {
			found = found || strings.Contains(b, want)
		}
		if !found {
			t.Errorf("no violation %q in %q", want, bad)
		}
	}
}

func TestGapTracker(t *testing.T) {
	g := newGapTracker()
	t0 := time.Now().Add(time.Minute) // after every touch
	req := map[string]bool{"ns/sa": true}
	// Absent before it was ever present: no gap.
	if _, ongoing := g.observe(t0, map[string]bool{}, req); len(ongoing) != 0 {
		t.Errorf("gap before the entry existed: %v", ongoing)
	}
	g.observe(t0.Add(time.Second), map[string]bool{"ns/sa": true}, req)
	_, ongoing := g.observe(t0.Add(2*time.Second), map[string]bool{}, req)
	_, ongoing = g.observe(t0.Add(5*time.Second), map[string]bool{}, req)
	if ongoing["ns/sa"] != 3*time.Second {
		t.Errorf("ongoing gap %v, want 3s", ongoing["ns/sa"])
	}
	ended, _ := g.observe(t0.Add(6*time.Second), map[string]bool{"ns/sa": true}, req)
	if ended["ns/sa"] != 4*time.Second {
		t.Errorf("ended gap %v, want 4s", ended["ns/sa"])
	}
	// No longer required: its absence is no gap, and after a touch it
	// must be present again before a gap counts.
	g.observe(t0.Add(7*time.Second), map[string]bool{}, map[string]bool{})
	if _, ongoing := g.observe(t0.Add(8*time.Second), map[string]bool{}, req); len(ongoing) != 0 {
		t.Errorf("gap of an entry that left and came back: %v", ongoing)
	}
}

func TestOverlaps(t *testing.T) {
	a := newKey("p", "x", []string{"k8s:ns:n", "k8s:sa:s", "k8s:pod-label:app:model", "k8s:pod-label:identity.trustplane.dev/variant:stable"})
	b := newKey("p", "y", []string{"k8s:ns:n", "k8s:sa:s", "k8s:pod-label:app:model", "k8s:pod-label:identity.trustplane.dev/variant:canary"})
	c := newKey("p", "z", []string{"k8s:ns:n", "k8s:sa:s", "k8s:pod-label:identity.trustplane.dev/variant:stable"})
	d := newKey("p", "z", []string{"k8s:ns:m", "k8s:sa:s", "k8s:pod-label:identity.trustplane.dev/variant:stable"})
	for _, tc := range []struct {
		x, y entryKey
		want bool
	}{{a, b, false}, {a, c, true}, {c, a, true}, {a, d, false}, {b, c, false}} {
		if got := tc.x.overlaps(tc.y); got != tc.want {
			t.Errorf("%s overlaps %s = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
	if !a.matchesPod("n", "s", map[string]string{"app": "model", "identity.trustplane.dev/variant": "stable", "x": "y"}) {
		t.Error("a pod with every label does not match")
	}
	if a.matchesPod("n", "s", map[string]string{"app": "model"}) {
		t.Error("a pod without the variant matches")
	}
}

func TestOurs(t *testing.T) {
	o := &oracle{prefix: "trustplane.967c228b."}
	for id, want := range map[string]bool{
		"trustplane.967c228b.0123456789ab.0123456789abcdef0123":      true,
		"trustplane.0badc0de.0123456789ab.0123456789abcdef0123":      false,
		"trustplane.967c228b.team.0123456789ab.0123456789abcdef0123": false,
		"trustplane.967c228b.0123456789AB.0123456789abcdef0123":      false,
		"trustplane.967c228b.0123456789ab.0123456789abcdef01234":     false,
		"hand-made-1": false,
	} {
		if got := o.ours(id); got != want {
			t.Errorf("ours(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestTargetProblems(t *testing.T) {
	src, err := newSourceCAs()
	if err != nil {
		t.Fatal(err)
	}
	spireCA, err := src.newCert(true)
	if err != nil {
		t.Fatal(err)
	}
	badCA, err := src.newCert(true)
	if err != nil {
		t.Fatal(err)
	}
	src.bad[fingerprint(badCA)] = true
	stranger, err := src.newCert(true)
	if err != nil {
		t.Fatal(err)
	}
	ch := &checker{src: src, spireEver: map[string]bool{fingerprint(spireCA): true}}
	good := encode(append([]*x509.Certificate{spireCA}, src.current...))
	for _, tc := range []struct {
		name, data, want string
	}{
		{"complete", good, ""},
		{"without the source", encode([]*x509.Certificate{spireCA}), "partial"},
		{"empty", "", "no certificate"},
		{"truncated", good[:len(good)-40], "invalid bundle"},
		{"with a corrupted version's CA", good + encode([]*x509.Certificate{badCA}), "corrupted"},
		{"with a CA no source held", good + encode([]*x509.Certificate{stranger}), unknownCert},
	} {
		got := ch.classifyTarget(tc.data)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
