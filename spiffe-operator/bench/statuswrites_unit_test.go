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

// TestBlockP99sTakesEachBlockInTheOrderTheSamplesRan checks blockP99s
// against values worked out by hand: each block's p99 is its own slowest
// sample here (blocks of 10: the p99 is the 10th of 10), the blocks follow
// the order of the samples, not their times, a partial last block is left
// out, and fewer than two blocks give none.
func TestBlockP99sTakesEachBlockInTheOrderTheSamplesRan(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var windows []sampleWindow
	for i := range 25 {
		took := ms(10 + i%10)
		if i == 3 {
			took = ms(90) // the first block's slowest
		}
		windows = append(windows, sampleWindow{took: took})
	}
	got := blockP99s(windows, 10)
	if len(got) != 2 || got[0] != ms(90) || got[1] != ms(19) {
		t.Errorf("blocks of 10 over 25 samples: got %v, want [90ms 19ms]", got)
	}
	if got := blockP99s(windows[:19], 10); got != nil {
		t.Errorf("19 samples in blocks of 10: got %v, want none", got)
	}
}
