package entrysync

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestSettleRacingAReleaseNotifiesTheWaitingOwner runs Release and Settle concurrently many
// times: a release that waits must be notified by Settle, or succeed.
func TestSettleRacingAReleaseNotifiesTheWaitingOwner(t *testing.T) {
	for i := 0; i < 200; i++ {
		api := fake.New()
		ctx := context.Background()
		old, young := owner("old", time.Hour), owner("young", 0)
		e := entry("/ns/a/sa/x", 0)
		s, n, _, _ := restartedWithAHolder(t, api, old, young, e, nil)
		var wg sync.WaitGroup
		var rerr error
		wg.Add(2)
		go func() { defer wg.Done(); rerr = s.Release(ctx, old, []spiffeid.ID{parent}) }()
		go func() { defer wg.Done(); s.Settle() }()
		wg.Wait()
		if errors.Is(rerr, ErrUnsettled) {
			if !n.has(old) {
				t.Fatalf("iteration %d: release waited but Settle did not notify it", i)
			}
		} else if rerr != nil {
			t.Fatalf("release: %v", rerr)
		}
	}
}

// TestAReleaseTheNextClaimantsPassAndSettleRacingEndWithTheClaimantHolding: the waiting holder's release, the
// next claimant's first pass and Settle race; the holder retries only when
// notified (as the operator's Blocked pass would). At the end the next
// claimant must hold the entry, and the holder's release must have run.
func TestAReleaseTheNextClaimantsPassAndSettleRacingEndWithTheClaimantHolding(t *testing.T) {
	for i := 0; i < 100; i++ {
		api := fake.New()
		ctx := context.Background()
		old, young := owner("old", time.Hour), owner("young", 0)
		e := entry("/ns/a/sa/x", 0)
		s, n, oldID, youngID := restartedWithAHolder(t, api, old, young, e, nil)
		var wg sync.WaitGroup
		var rerr error
		wg.Add(3)
		go func() { defer wg.Done(); rerr = s.Release(ctx, old, []spiffeid.ID{parent}) }()
		go func() {
			defer wg.Done()
			if _, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
				t.Error(err)
			}
		}()
		go func() { defer wg.Done(); s.Settle() }()
		wg.Wait()
		if errors.Is(rerr, ErrUnsettled) {
			if !n.has(old) {
				t.Fatalf("iteration %d: waiting release never notified", i)
			}
			if err := s.Release(ctx, old, []spiffeid.ID{parent}); err != nil {
				t.Fatalf("iteration %d: release after notify: %v", i, err)
			}
		} else if rerr != nil {
			t.Fatalf("iteration %d: %v", i, rerr)
		}
		if api.Get(oldID) != nil || api.Get(youngID) == nil {
			// young may have to pass again when it ran before the release
			// with its claim known: then it was handed over in the release.
			t.Fatalf("iteration %d: SPIRE holds %v, want only %s", i, api.All(), youngID)
		}
	}
}
