package trustbundle

import (
	"testing"
	"time"
)

// TestAStaleLeftSourceAtDoesNotShortenTheGraceOfACAThatCameBack: old is
// rotated out at T0 (retainRemovedFor 1h; leftSourceAt T0 recorded), comes
// back to the sources at T0+50m, and leaves again at T0+51m. The pass at
// T0+50m published old as a source CA and the process remembers it so
// (publication.left has no entry for it), but that pass's status write is
// lost (a conflict), so the status still says old left at T0. vouched
// took the earlier of the status's time and the memory's, and with no
// time in memory the status's stale T0: the second leave was retained for
// 9 minutes instead of an hour. A CA the process last published from the
// sources now leaves when the pass finds it gone.
func TestAStaleLeftSourceAtDoesNotShortenTheGraceOfACAThatCameBack(t *testing.T) {
	r := newRotation(t)
	r.pass()
	r.withOld(false) // T0: old leaves
	r.pass()
	r.now = r.now.Add(50 * time.Minute)
	r.withOld(true) // T0+50m: old is back
	lost := r.tb.Status.DeepCopy()
	r.pass()
	r.tb.Status = *lost // that pass's status write failed
	r.now = r.now.Add(time.Minute)
	r.withOld(false) // T0+51m: old leaves again
	r.pass()
	r.now = r.now.Add(20 * time.Minute) // T0+71m
	r.pass()
	if !r.publishesOld() {
		t.Errorf("old left the sources again 20m ago (grace 1h) and is no longer published: its grace ran from its first leave, 71m ago, though this process last published it as a source CA")
	}
}
