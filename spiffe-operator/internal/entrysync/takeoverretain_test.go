package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAnEntryTakenOverInThePassDoesNotCoverThePodOfAnEntryNoLongerWanted:
// pod w (app=web) runs under old, which the older object holds. A younger
// object, known to this process, holds next (same pod shape). The older
// object changes its template from old to next: it takes next over
// (delete, then create) and old is no longer wanted. SPIRE refuses the
// older object's create of next (a federated bundle it lacks, say). The
// younger object's entry, deleted by the takeover, must not count as
// serving w when old is withdrawn, or old goes too and w is left with no
// entry at all while SPIRE refuses.
func TestAnEntryTakenOverInThePassDoesNotCoverThePodOfAnEntryNoLongerWanted(t *testing.T) {
	api := fake.New()
	s := withPods(api, podW())
	ctx := context.Background()
	older, younger := owner("older", time.Hour), owner("younger", 0)
	old := named("/old", "a", "sa", "app", "web")
	next := named("/next", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(ctx, younger, ptrs([]entries.Entry{next}), nil); err != nil {
		t.Fatal(err)
	}
	if !holdsPath(api, "/old") || !holdsPath(api, "/next") {
		t.Fatalf("setup: entries %v", api.All())
	}
	api.Reject[next.SpiffeID.String()] = true
	out, _ := s.Sync(ctx, older, ptrs([]entries.Entry{next}), nil)
	if !holdsPath(api, "/old") && !holdsPath(api, "/next") {
		t.Errorf("pod w runs and SPIRE refused the entry meant to serve it, yet SPIRE holds no entry that serves it: "+
			"old went with the entry the takeover deleted (held back %d, retained %d, failed %d)",
			out.HeldBack, out.Retained, len(out.Failed))
	}
}
