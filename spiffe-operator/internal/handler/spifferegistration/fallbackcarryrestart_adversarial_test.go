package spifferegistration

import (
	"context"
	"slices"
	"testing"
)

// TestARestartKeepsACarriedLastGoodEntry: as
// TestAFallbackEditKeepsACarriedLastGoodEntry, with a restart in place of
// the edit. The fallback yields web (main renders it) and carries its last
// good entry; its status records it (keptEntries). After a restart, the
// fallback's first pass runs before main's: main is not judged and renders
// web (claimHeld), so carry is called. carry read only byWorkload and
// previous, never the status's records (memo.recorded), so end() dropped
// the record; SPIRE then refused main's entry, main held nothing for web,
// and the fallback had no last good entry left (seen failing). Without the
// restart web kept it: a restart changed what SPIRE holds.
func TestARestartKeepsACarriedLastGoodEntry(t *testing.T) {
	for _, restart := range []bool{false, true} {
		ctx := context.Background()
		e, main, fb := webMovedIntoARefusedMain(ctx, t)
		t.Logf("restart=%v: fallback keptEntries after the yield: %d", restart, len(fb.Status.KeptEntries))
		if restart {
			storeStatuses(ctx, t, e, main, fb)
			e.h = restarted(e)
			_ = e.h.CreateOrUpdate(ctx, fb) // the first pass after the start, before main's
			t.Logf("restart=%v: fallback keptEntries after the restart's first pass: %d", restart, len(fb.Status.KeptEntries))
		}
		rollWeb(ctx, t, e)
		for range 3 {
			_ = e.h.CreateOrUpdate(ctx, main)
			_ = e.h.CreateOrUpdate(ctx, fb)
		}
		got := paths(e.api)
		t.Logf("restart=%v: SPIRE holds %v", restart, got)
		if !slices.Equal(got, []string{tierFallbackWeb}) {
			t.Errorf("restart=%v: web holds %v: main's entry is refused and main holds nothing for web, yet the fallback's carried last good entry "+
				"(recorded in its status) is gone after the restart", restart, got)
		}
	}
}
