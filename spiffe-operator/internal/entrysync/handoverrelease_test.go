package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// handOverRacingARelease sets up two owners of one key: old holds it,
// young (the next claimant) is masked. The next create SPIRE receives
// (the hand-over's, made for young) is in flight while young is deleted
// (released), as when both policies are deleted together
// (kubectl delete -f, helm uninstall): ten workers run their Delete
// passes side by side.
func handOverRacingARelease(t *testing.T) (api *slowList, s *Syncer, old, young Owner, e entries.Entry) {
	t.Helper()
	api = &slowList{EntryAPI: fake.New()}
	s = New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	ctx := context.Background()
	old, young = owner("old", time.Hour), owner("young", 0)
	e = named("/shared", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, old, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: young must be masked by old: %v, %+v", err, out)
	}
	api.onCreate = func() {
		// The hand-over's create is in flight: young is deleted meanwhile.
		// Its release reads the view, which does not hold the entry yet.
		if err := s.Release(ctx, young, nil); err != nil {
			t.Errorf("release young: %v", err)
		}
	}
	return api, s, old, young, e
}

// TestAHandOverLandingAfterTheNextHoldersReleaseIsDeleted: both owners
// of a shared entry are deleted at once (kubectl delete -f, an uninstall).
// The holder's release deletes its entry and hands it over to young in
// the same call; young's release runs while that create is in flight,
// finds nothing of young's in the view and releases young's claims. When
// the create lands it is deleted again, as a put-back is: on the old code
// it stayed, an identity both policies withdrew, until a later read of
// that parent (a resync, or the next start).
func TestAHandOverLandingAfterTheNextHoldersReleaseIsDeleted(t *testing.T) {
	ctx := context.Background()
	api, s, old, young, e := handOverRacingARelease(t)
	if err := s.Release(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	youngID := s.opts.IDs.EntryID(young.Tag(), e.Key())
	if got := api.Get(youngID); got != nil {
		t.Errorf("both owners were released, yet SPIRE still holds %s (SPIFFE ID %s) under the tag of the released owner %s: writes %v",
			youngID, e.SpiffeID, young.Name, api.Writes())
	}
	// Nothing the operator does next finds it: a later pass of another
	// owner under the same parent works from the fresh view, which
	// records the entry as young's, and nobody releases young again.
	other := owner("other", 0)
	if _, err := s.Sync(ctx, other, ptrs([]entries.Entry{named("/other", "b", "sa")}), nil); err != nil {
		t.Fatal(err)
	}
	if holdsPath(api.EntryAPI, "/shared") {
		t.Errorf("after another owner's pass under the same parent the released owner's entry is still there: %v", api.All())
	}
}

// TestAHandOverOnWithdrawalLandingAfterTheNextHoldersReleaseIsDeleted:
// the same race through deleteStale: the holder stops wanting the entry
// (no pod needs it) while young, its next claimant, is being deleted.
func TestAHandOverOnWithdrawalLandingAfterTheNextHoldersReleaseIsDeleted(t *testing.T) {
	ctx := context.Background()
	api, s, old, young, e := handOverRacingARelease(t)
	if _, err := s.Sync(ctx, old, nil, nil); err != nil {
		t.Fatal(err)
	}
	youngID := s.opts.IDs.EntryID(young.Tag(), e.Key())
	if got := api.Get(youngID); got != nil {
		t.Errorf("old withdrew the entry and young was released, yet SPIRE holds %s under the released owner's tag: writes %v",
			youngID, api.Writes())
	}
}
