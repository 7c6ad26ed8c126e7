package entrysync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// restartedWithAHolder has a first process make old the holder of e, which
// young wants too, and returns a second process's Syncer (fresh memory, the
// same SPIRE) that holds its deletions until settled, with its notifications
// and the IDs old's and young's entries have. mut, when set, changes that
// Syncer's options.
func restartedWithAHolder(t *testing.T, api *fake.EntryAPI, old, young Owner, e entries.Entry, mut func(*Options)) (*Syncer, *notified, string, string) {
	t.Helper()
	first, _, _ := newSyncer(api)
	for _, o := range []Owner{old, young} {
		if _, err := first.Sync(context.Background(), o, ptrs([]entries.Entry{e}), nil); err != nil {
			t.Fatal(err)
		}
	}
	n := &notified{}
	opts := Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Notify: n.add, Now: (&clock{now: t0}).Now,
		HoldUntilSettled: true}
	if mut != nil {
		mut(&opts)
	}
	s := New(api, opts)
	return s, n, s.opts.IDs.EntryID(old.Tag(), e.Key()), s.opts.IDs.EntryID(young.Tag(), e.Key())
}

// TestAReleaseBeforeTheFirstPassesWaitsForTheNextClaimant: after a restart,
// the holder of an entry that another object wants is deleted before that
// object's first pass in the new process (both were in the startup queue).
// The new process does not know yet that the other object wants the entry:
// a release then deleted the entry and created nothing in its place, and
// the other object's pods had no entry until its pass came in the queue.
// The release must wait until every object had its first pass, and then
// hand the entry over in the same call.
func TestAReleaseBeforeTheFirstPassesWaitsForTheNextClaimant(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := entry("/ns/a/sa/x", 0)
	s, n, oldID, youngID := restartedWithAHolder(t, api, old, young, e, nil)

	if err := s.Release(ctx, old, []spiffeid.ID{parent}); !errors.Is(err, ErrUnsettled) {
		t.Errorf("a release before the first passes returned %v, want ErrUnsettled", err)
	}
	if api.Get(oldID) == nil {
		t.Fatalf("the holder's entry was deleted before the object that wants it next had its first pass: SPIRE holds %v", api.All())
	}
	out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 1 {
		t.Fatalf("the next claimant's first pass: %v %+v, want the entry masked by the holder", err, out)
	}
	s.Settle()
	if !n.has(old) {
		t.Errorf("Settle did not ask for a pass of the owner whose release waited (notified %v)", n.uids)
	}
	if err := s.Release(ctx, old, []spiffeid.ID{parent}); err != nil {
		t.Fatalf("the release after Settle: %v", err)
	}
	if api.Get(oldID) != nil || api.Get(youngID) == nil {
		t.Errorf("after the release SPIRE holds %v, want only %s, handed over in the release", api.All(), youngID)
	}
}

// TestAReleaseOfAnOwnerHoldingNothingDoesNotWait: an object that holds no
// entry has nothing to hand over; its deletion does not wait for the first
// passes.
func TestAReleaseOfAnOwnerHoldingNothingDoesNotWait(t *testing.T) {
	api := fake.New()
	old, young := owner("old", time.Hour), owner("young", 0)
	s, _, oldID, _ := restartedWithAHolder(t, api, old, young, entry("/ns/a/sa/x", 0), nil)
	if err := s.Release(context.Background(), young, []spiffeid.ID{parent}); err != nil {
		t.Errorf("the release of an owner holding nothing returned %v", err)
	}
	if api.Get(oldID) == nil {
		t.Errorf("the release of an owner holding nothing deleted the holder's entry: %v", api.All())
	}
}

// TestOrphanCollectionWaitsForTheFirstPasses: as in
// TestAReleaseBeforeTheFirstPassesWaitsForTheNextClaimant, but the holder
// was removed while the operator was down, without its Delete pass: orphan
// collection, at a read of the parent by a third object or over every
// parent, must not delete its entry before the object that wants it next
// had its first pass, and then hands it over.
func TestOrphanCollectionWaitsForTheFirstPasses(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young, third := owner("old", time.Hour), owner("young", 0), owner("third", 0)
	e := entry("/ns/a/sa/x", 0)
	live := newLiveOwners(young, third)
	s, _, oldID, youngID := restartedWithAHolder(t, api, old, young, e, func(o *Options) { o.Alive, o.AliveNow = live.read, live.read })

	if _, err := s.Sync(ctx, third, ptrs([]entries.Entry{entry("/ns/b/sa/y", 0)}), nil); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CollectEverywhere(ctx); !errors.Is(err, ErrUnsettled) || n != 0 {
		t.Errorf("CollectEverywhere before the first passes: %d, %v; want 0, ErrUnsettled", n, err)
	}
	if api.Get(oldID) == nil {
		t.Fatalf("orphan collection deleted the gone holder's entry before the object that wants it next had its first pass: %v", api.All())
	}
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("the next claimant's first pass: %v %+v, want the entry masked", err, out)
	}
	s.Settle()
	if n, err := s.CollectEverywhere(ctx); err != nil || n != 1 {
		t.Fatalf("CollectEverywhere after Settle: %d, %v; want the gone holder's entry", n, err)
	}
	if api.Get(oldID) != nil || api.Get(youngID) == nil {
		t.Errorf("after collection SPIRE holds %v, want only %s", api.All(), youngID)
	}
}

// TestAHolderThatStopsWantingBeforeTheFirstPassesKeepsTheEntryForRunningPods:
// after a restart the holder's first pass no longer wants the entry (its
// spec changed while the operator was down) and comes before the first
// pass of the object that wants the entry next. That is no deletion to
// hold: the pods that run under the entry keep it (retention), and the
// next object's first pass takes it over.
func TestAHolderThatStopsWantingBeforeTheFirstPassesKeepsTheEntryForRunningPods(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := saEntry("a", "sa", "app", "web")
	s, _, oldID, youngID := restartedWithAHolder(t, api, old, young, e, func(o *Options) { o.Pods = podW().labels })

	if _, err := s.Sync(ctx, old, ptrs([]entries.Entry{saEntry("b", "other")}), nil); err != nil {
		t.Fatal(err)
	}
	if api.Get(oldID) == nil {
		t.Fatalf("the holder's first pass deleted the entry a running pod needs before the next claimant's first pass: %v", api.All())
	}
	if _, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if api.Get(oldID) != nil || api.Get(youngID) == nil {
		t.Errorf("after the next claimant's first pass SPIRE holds %v, want %s", api.All(), youngID)
	}
}

// TestASyncerNotHoldingIsSettledFromTheStart: without HoldUntilSettled a
// release deletes at once, as before.
func TestASyncerNotHoldingIsSettledFromTheStart(t *testing.T) {
	var api spire.EntryAPI = fake.New()
	s, _, _ := newSyncer(api)
	if !s.Settled() {
		t.Errorf("a Syncer without HoldUntilSettled is not settled")
	}
}
