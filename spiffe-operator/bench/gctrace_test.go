package bench

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// gcTraceEnv makes the operator's runtime print a line for each garbage
// collection (to stderr, its log), so that the sizing run can tell when its
// collections ran. The runtime prints one line per cycle; its cost is
// nothing next to the cycle's.
const gcTraceEnv = "GODEBUG=gctrace=1"

// gcTraceLine matches the runtime's line for one cycle: its start since
// the runtime started (in seconds, to the millisecond) and the wall time of
// its three phases in milliseconds (stop the world, concurrent mark, mark
// termination).
var gcTraceLine = regexp.MustCompile(`gc \d+ @(\d+\.\d+)s \d+%[^:]*: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock`)

// span is a stretch of wall time; from and to are equal for an instant.
type span struct {
	from, to time.Time
}

// gcSpans returns, in the order they ran, when the collections that log
// traces ran: started is when the process started (the runtime counts
// from its own start, a millisecond or so later), so each span is accurate
// to a few milliseconds. Lines that do not parse are left out.
func gcSpans(log []byte, started time.Time) []span {
	var out []span
	for _, m := range gcTraceLine.FindAllSubmatch(log, -1) {
		at, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			continue
		}
		var took float64
		ok := true
		for _, phase := range m[2:5] {
			ms, err := strconv.ParseFloat(string(phase), 64)
			if err != nil {
				ok = false
				break
			}
			took += ms
		}
		if !ok {
			continue
		}
		from := started.Add(time.Duration(at * float64(time.Second)))
		out = append(out, span{from: from, to: from.Add(time.Duration(took * float64(time.Millisecond)))})
	}
	return out
}

// within returns the spans that overlap [from, to].
func within(spans []span, from, to time.Time) []span {
	var out []span
	for _, s := range spans {
		if !s.to.Before(from) && !s.from.After(to) {
			out = append(out, s)
		}
	}
	return out
}

// gcCycles returns the operator's garbage collections that overlapped
// [from, to], read from its log.
func (p *process) gcCycles(from, to time.Time) ([]span, error) {
	log, err := os.ReadFile(p.log)
	if err != nil {
		return nil, fmt.Errorf("read the operator's log for its GC trace: %w", err)
	}
	return within(gcSpans(log, p.started), from, to), nil
}

// spanTimes says how long spans took: their mean and the longest.
func spanTimes(spans []span) string {
	if len(spans) == 0 {
		return "none"
	}
	var sum, longest time.Duration
	for _, s := range spans {
		d := s.to.Sub(s.from)
		sum += d
		longest = max(longest, d)
	}
	return fmt.Sprintf("mean %s, longest %s", (sum / time.Duration(len(spans))).Round(100*time.Microsecond), longest.Round(100*time.Microsecond))
}
