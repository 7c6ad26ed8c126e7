package bench

import (
	"testing"
	"time"
)

// TestOverlapStatusWritesCountsWritesDuringOrJustAfterASample checks the
// attribution of status writes to samples against counts worked out by
// hand: a write counts for a sample when it lands from the sample's start
// to grace after its end, and the tail is the samples at or over the
// percentile's time.
func TestOverlapStatusWritesCountsWritesDuringOrJustAfterASample(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	windows := []sampleWindow{
		{start: at(0), took: ms(10)},   // write at 5: during
		{start: at(100), took: ms(50)}, // write at 160: within the grace of 25
		{start: at(200), took: ms(10)}, // write at 240: 30 after the end, outside
		{start: at(300), took: ms(40)}, // none
		{start: at(400), took: ms(10)}, // write at 399: before the start
	}
	writes := []time.Time{at(5), at(160), at(240), at(399)}

	got := overlapSamples("status writes landed", windows, instants(writes), 60, ms(25))
	// The p60 of 10, 10, 10, 40, 50 is the third, 10 ms, so every sample is
	// in the tail; the p80 is 40 ms: the samples of 40 and 50 ms.
	if got.events != 4 || got.samples != 5 || got.samplesWith != 2 || got.tail != 5 || got.tailWith != 2 {
		t.Errorf("p60: got %+v, want 4 writes, 2 of 5 samples overlapped, 2 of 5 in the tail", got)
	}
	got = overlapSamples("status writes landed", windows, instants(writes), 80, ms(25))
	if got.tail != 2 || got.tailWith != 1 {
		t.Errorf("p80: got %d of %d in the tail overlapped, want 1 of 2", got.tailWith, got.tail)
	}
	if got := overlapSamples("status writes landed", nil, instants(writes), 99, ms(25)); got.samples != 0 || got.tail != 0 || got.events != 4 {
		t.Errorf("no samples: got %+v, want none counted", got)
	}
}
