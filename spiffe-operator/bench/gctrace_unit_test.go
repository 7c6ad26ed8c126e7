package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gcChildEnv makes TestMain run forceCollections instead of the tests.
const gcChildEnv = "BENCH_GC_TRACE_CHILD"

// forcedCollections is how many collections forceCollections runs.
const forcedCollections = 3

// forceCollections runs forcedCollections collections, each on garbage
// of its own, and writes the wall time just before and just after each,
// in Unix nanoseconds, one "before after" pair a line.
func forceCollections(w io.Writer) {
	var keep [][]byte
	for range forcedCollections {
		for range 1000 {
			keep = append(keep, make([]byte, 4096))
		}
		keep = keep[:0]
		before := time.Now()
		runtime.GC()
		_, _ = fmt.Fprintf(w, "%d %d\n", before.UnixNano(), time.Now().UnixNano())
	}
}

// TestGCSpansMatchForcedCollections runs a copy of this binary with the
// runtime's GC trace on, which forces collections at times it writes down
// itself, and checks that gcSpans places a collection within each of those
// stretches of wall time: the trace's times, taken from the process's
// start, agree with the clock to within a few tens of milliseconds.
func TestGCSpansMatchForcedCollections(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), gcChildEnv+"=1", gcTraceEnv)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v: %s", err, stderr.String())
	}
	spans := gcSpans(stderr.Bytes(), started)
	if len(spans) < forcedCollections {
		t.Fatalf("%d collections in the trace, want at least %d:\n%s", len(spans), forcedCollections, stderr.String())
	}
	const slack = 50 * time.Millisecond
	calls := 0
	for sc := bufio.NewScanner(&stdout); sc.Scan(); calls++ {
		var before, after int64
		if _, err := fmt.Sscan(sc.Text(), &before, &after); err != nil {
			t.Fatalf("child's line %q: %v", sc.Text(), err)
		}
		from, to := time.Unix(0, before), time.Unix(0, after)
		found := false
		for _, s := range spans {
			found = found || (!s.from.Before(from.Add(-slack)) && !s.to.After(to.Add(slack)))
		}
		if !found {
			t.Errorf("no collection placed within %s of the call from %s to %s; spans: %v", slack,
				from.Format(time.StampMicro), to.Format(time.StampMicro), spans)
		}
	}
	if calls != forcedCollections {
		t.Fatalf("the child wrote %d calls, want %d: %s", calls, forcedCollections, stdout.String())
	}
}

// TestGCSpansReadsTheTraceFormat checks the reading of the runtime's line
// against values worked out by hand, among log lines of other kinds and a
// line cut short.
func TestGCSpansReadsTheTraceFormat(t *testing.T) {
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	log := strings.Join([]string{
		`{"level":"info","msg":"Starting workers","controller":"spifferegistration"}`,
		`gc 1 @0.012s 1%: 0.011+1.2+0.003 ms clock, 0.022+0.5/1.0/0.2+0.006 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P`,
		`gc 2 @3.456s 2%: 0.5+250+1 ms clock, 1+10/200/0+2 ms cpu, 290->291->262 MB, 288 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)`,
		`gc 3 @4.000s 2%: 0.5+`,
		``,
	}, "\n")
	got := gcSpans([]byte(log), started)
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	want := []span{
		{from: started.Add(12 * time.Millisecond), to: started.Add(12*time.Millisecond + ms(1.214))},
		{from: started.Add(3456 * time.Millisecond), to: started.Add(3456*time.Millisecond + ms(251.5))},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d spans %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !got[i].from.Equal(want[i].from) || got[i].to.Sub(want[i].to).Abs() > time.Microsecond {
			t.Errorf("span %d: got %s + %s, want %s + %s", i, got[i].from.Sub(started), got[i].to.Sub(got[i].from),
				want[i].from.Sub(started), want[i].to.Sub(want[i].from))
		}
	}
}

// TestOverlapSamplesCountsSpansThatRanDuringASample checks, by hand-worked
// counts, that a span overlapping any part of a sample counts for it, one
// that ended before or began after does not, and a grace extends a
// sample's end.
func TestOverlapSamplesCountsSpansThatRanDuringASample(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	windows := []sampleWindow{
		{start: at(0), took: ms(10)},   // span -20..-1 ended before: none
		{start: at(100), took: ms(50)}, // span 140..160: over its end
		{start: at(200), took: ms(10)}, // span 190..250: covers it
		{start: at(300), took: ms(40)}, // span 345..400: 5 ms after its end
	}
	spans := []span{{at(-20), at(-1)}, {at(140), at(160)}, {at(190), at(250)}, {at(345), at(400)}}
	got := overlapSamples("collections ran", windows, spans, 50, 0)
	// The p50 of 10, 10, 40, 50 is the second, 10 ms: all four samples.
	if got.events != 4 || got.samplesWith != 2 || got.tail != 4 || got.tailWith != 2 {
		t.Errorf("grace 0: got %+v, want 2 of 4 samples overlapped", got)
	}
	got = overlapSamples("collections ran", windows, spans, 75, ms(5))
	// The p75 is 40 ms: the samples of 40 and 50 ms, both overlapped with
	// a grace of 5 ms.
	if got.samplesWith != 3 || got.tail != 2 || got.tailWith != 2 {
		t.Errorf("grace 5ms: got %+v, want 3 of 4 overlapped, 2 of 2 in the tail", got)
	}
	if s := got.String(); !strings.Contains(s, "4 collections ran during the samples") || !strings.Contains(s, "within 5ms after it") {
		t.Errorf("report clause %q", s)
	}
}
