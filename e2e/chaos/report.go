package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Invariant names, as the report prints them.
const (
	InvForeign      = "foreign state unchanged"
	InvSpireExact   = "SPIRE holds exactly the desired entries"
	InvIdentityGap  = "running pod's entry never absent beyond fail-over"
	InvBundle       = "bundle targets complete and valid"
	InvBindings     = "no two bindings' outputs cover the same pods"
	InvLeaderWrites = "no write from a non-leader"
	InvQuiescence   = "quiescence reached"
)

var invariantOrder = []string{InvForeign, InvSpireExact, InvIdentityGap, InvBundle, InvBindings, InvLeaderWrites, InvQuiescence}

// Violation is one breach of an invariant.
type Violation struct {
	Invariant string
	At        time.Duration // since the start of the churn
	Detail    string
}

// Report is the outcome of one run.
type Report struct {
	Seed     int64
	Duration time.Duration
	// Load is the machine's load average at the end of the run.
	Load string

	mu         sync.Mutex
	start      time.Time
	faults     map[string]int
	churn      map[string]int
	checks     map[string]int
	violations []Violation
	// WorstGap is the longest time a required entry was absent from SPIRE
	// while SPIRE answered, and WorstGapKey names it.
	WorstGap    time.Duration
	WorstGapKey string
	// Quiescence is the time from the end of the last fault to the state
	// every quiescence check holds.
	Quiescence time.Duration
	// Notes are facts of the run worth printing (throttled replicas,
	// supervisor restarts, margins).
	Notes []string
}

func newReport(seed int64, d time.Duration) *Report {
	return &Report{Seed: seed, Duration: d, start: time.Now(), faults: map[string]int{},
		churn: map[string]int{}, checks: map[string]int{}}
}

// begin marks the start of churn and faults, the origin of the times printed.
func (r *Report) begin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start = time.Now()
}

func (r *Report) since() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.start).Round(time.Millisecond)
}

func (r *Report) fault(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[kind]++
}

func (r *Report) churned(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.churn[kind]++
}

func (r *Report) checked(inv string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[inv] += n
}

func (r *Report) violate(inv, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, Violation{Invariant: inv, At: time.Since(r.start).Round(time.Millisecond), Detail: fmt.Sprintf(format, args...)})
}

func (r *Report) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Report) gap(key string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d > r.WorstGap {
		r.WorstGap, r.WorstGapKey = d, key
	}
}

// Violations returns every violation found.
func (r *Report) Violations() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Violation(nil), r.violations...)
}

// Faults returns the faults injected, by kind.
func (r *Report) Faults() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyCounts(r.faults)
}

// Checks returns the invariant checks run, by invariant.
func (r *Report) Checks() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyCounts(r.checks)
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Table renders the report.
func (r *Report) Table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run: seed %d, churn and faults for %s, load average %s\n", r.Seed, r.Duration, r.Load)
	b.WriteString("\nfaults injected\n")
	writeCounts(&b, r.faults)
	b.WriteString("\nchurn applied\n")
	writeCounts(&b, r.churn)
	perInv := map[string]int{}
	for _, v := range r.violations {
		perInv[v.Invariant]++
	}
	b.WriteString("\n| invariant | checks | violations |\n| --- | ---: | ---: |\n")
	for _, inv := range invariantOrder {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", inv, r.checks[inv], perInv[inv])
	}
	fmt.Fprintf(&b, "\nviolations: %d\n", len(r.violations))
	fmt.Fprintf(&b, "worst identity gap: %s (%s)\n", r.WorstGap.Round(time.Millisecond), orNone(r.WorstGapKey))
	fmt.Fprintf(&b, "time to quiescence after the last fault: %s\n", r.Quiescence.Round(time.Millisecond))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for i, v := range r.violations {
		if i == 50 {
			fmt.Fprintf(&b, "... %d more\n", len(r.violations)-50)
			break
		}
		fmt.Fprintf(&b, "VIOLATION at +%s [%s]: %s\n", v.At, v.Invariant, v.Detail)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func writeCounts(b *strings.Builder, m map[string]int) {
	keys := make([]string, 0, len(m))
	total := 0
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	b.WriteString("| kind | count |\n| --- | ---: |\n")
	for _, k := range keys {
		fmt.Fprintf(b, "| %s | %d |\n", k, m[k])
	}
	fmt.Fprintf(b, "| total | %d |\n", total)
}
