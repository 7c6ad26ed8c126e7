package entrysync

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAnOwnerGoneWithoutItsReleaseHandsItsEntryOverWhenCollected: two
// owners render one entry; the older holds it, the younger is masked. The
// older object goes without its Delete pass (its finalizer removed by hand
// while the operator runs), so no Release runs. Orphan collection, at the
// next read of the parent, deletes the holder's entry and must hand it to
// the younger owner in the same call. Before, the gone owner's claim kept
// masking the younger one, whose pods had no entry until a restart.
func TestAnOwnerGoneWithoutItsReleaseHandsItsEntryOverWhenCollected(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	live := newLiveOwners(old, young)
	s, c := newCollectingSyncer(api, live)
	e := entry("/ns/a/sa/x", 0)
	if _, err := s.Sync(ctx, old, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: young must be masked by old: %v %+v", err, out)
	}
	// old vanishes without a Release (finalizer removed by hand).
	live.gone(old)

	// young keeps passing (events, resyncs); the view grows due and is read
	// again, which collects old's entry as an orphan.
	for i := 0; i < 5; i++ {
		c.Add(2 * time.Minute)
		if _, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
			t.Fatal(err)
		}
	}
	youngID := s.opts.IDs.EntryID(young.Tag(), e.Key())
	if api.Get(youngID) == nil {
		t.Errorf("the live owner %s wants %s, its holder %s no longer exists and its entry was collected, "+
			"yet after five passes SPIRE holds no entry for it (the vanished owner's claim still masks it): %v",
			young.Name, e.SpiffeID, old.Name, api.All())
	}
}

// TestAnOwnerGoneWithoutItsReleaseMasksNobody: the older of two owners
// wins their key but has no entry (SPIRE failed its create), so the younger
// is masked. The older goes without its Delete pass; it has no entry for
// orphan collection to find. When the controller tells the Syncer it is gone
// (Forget), the younger owner must be asked for a pass, and that pass must
// create its entry. Before, the younger stayed masked for good.
func TestAnOwnerGoneWithoutItsReleaseMasksNobody(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	s, _, n := newSyncer(api)
	old, young, e := maskedByAWinnerWithoutAnEntry(t, api, s)
	if got := s.Forget(old.Kind, "another"); len(got) != 0 {
		t.Fatalf("Forget(another name) dropped %v", got)
	}
	if got := s.Forget(old.Kind, old.Name); len(got) != 1 || got[0].UID != old.UID {
		t.Fatalf("Forget(%s) dropped %v, want the older owner", old.Name, got)
	}
	if !n.has(young) {
		t.Errorf("the younger owner was not asked for a pass (notified %v)", n.uids)
	}
	out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 0 {
		t.Fatalf("the younger owner's pass after Forget: %v %+v, want its entry registered", err, out)
	}
	if api.Get(s.opts.IDs.EntryID(young.Tag(), e.Key())) == nil {
		t.Errorf("SPIRE holds no entry of the younger owner: %v", api.All())
	}
}

// TestAnOwnerReCreatedUnderItsNameReplacesTheGoneOnesClaims: as in
// TestAnOwnerGoneWithoutItsReleaseMasksNobody, the older of two owners wins
// their key without an entry, and goes without its Delete pass; but an
// object of its kind is created under its name before the controller sees
// it gone, so no Forget comes. The new object's first pass stands for the
// name now: the gone owner's claims must go with it, and the younger owner
// must be asked for a pass that creates its entry.
func TestAnOwnerReCreatedUnderItsNameReplacesTheGoneOnesClaims(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	s, _, n := newSyncer(api)
	old, young, e := maskedByAWinnerWithoutAnEntry(t, api, s)
	again := Owner{Kind: old.Kind, Name: old.Name, UID: "again-0000-0000-0000-000000000000", Created: t0}
	other := entry("/ns/a/sa/other", 0)
	if _, err := s.Sync(ctx, again, ptrs([]entries.Entry{other}), nil); err != nil {
		t.Fatal(err)
	}
	if !n.has(young) {
		t.Errorf("the younger owner was not asked for a pass (notified %v)", n.uids)
	}
	out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 0 {
		t.Fatalf("the younger owner's pass: %v %+v, want its entry registered (the gone owner's claim still masks it)", err, out)
	}
	if api.Get(s.opts.IDs.EntryID(young.Tag(), e.Key())) == nil {
		t.Errorf("SPIRE holds no entry of the younger owner: %v", api.All())
	}
	// An owner of another kind under the same name replaces nothing.
	s2, _, _ := newSyncer(fake.New())
	if _, err := s2.Sync(ctx, old, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	entryKind := Owner{Kind: "SpiffeEntry", Name: old.Name, UID: "entry-0000-0000-0000-000000000000", Created: t0}
	if _, err := s2.Sync(ctx, entryKind, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s2.claims.known(old.Tag(), e.Key()); !ok {
		t.Errorf("a SpiffeEntry named like a SpiffeRegistration dropped the registration's claims")
	}
}

// TestAForgottenHoldersEntryStaysUntilCollected: Forget drops the claims of
// a holder gone without its Delete pass but writes nothing: its entry stays
// in SPIRE, serving the pods it serves, while the next claimant reports it
// masked, until orphan collection confirms the holder gone and hands the
// entry over in the same call.
func TestAForgottenHoldersEntryStaysUntilCollected(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	live := newLiveOwners(old, young)
	s, c := newCollectingSyncer(api, live)
	e := entry("/ns/a/sa/x", 0)
	for _, o := range []Owner{old, young} {
		if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
			t.Fatal(err)
		}
	}
	oldID, youngID := s.opts.IDs.EntryID(old.Tag(), e.Key()), s.opts.IDs.EntryID(young.Tag(), e.Key())
	live.gone(old)
	writes := len(api.Writes())
	s.Forget(old.Kind, old.Name)
	out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 1 {
		t.Fatalf("the next claimant's pass before collection: %v %+v, want the entry masked", err, out)
	}
	if api.Get(oldID) == nil || len(api.Writes()) != writes {
		t.Fatalf("Forget or the pass before collection wrote to SPIRE (%v): the gone holder's entry must stay until collected", api.Writes()[writes:])
	}
	c.Add(2 * time.Minute)
	if _, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if api.Get(oldID) != nil || api.Get(youngID) == nil {
		t.Errorf("after collection SPIRE holds %v, want only %s", api.All(), youngID)
	}
}

// liveOwners is the set of owners a collecting Syncer finds alive (its
// Alive and AliveNow), which a test changes as objects go.
type liveOwners struct {
	mu   sync.Mutex
	tags map[string]bool
}

func newLiveOwners(owners ...Owner) *liveOwners {
	l := &liveOwners{tags: map[string]bool{}}
	for _, o := range owners {
		l.tags[o.Tag()] = true
	}
	return l
}

// gone takes o out of the live owners.
func (l *liveOwners) gone(o Owner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tags, o.Tag())
}

func (l *liveOwners) read(context.Context) (map[string]bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.tags), nil
}

// newCollectingSyncer returns a Syncer writing through api that collects
// the entries of owners live does not hold, and its clock.
func newCollectingSyncer(api spire.EntryAPI, live *liveOwners) (*Syncer, *clock) {
	c := &clock{now: t0}
	return New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Now: c.Now,
		Alive: live.read, AliveNow: live.read}), c
}

// maskedByAWinnerWithoutAnEntry has two owners of s claim one entry: the
// older wins it, but SPIRE (api) fails its create, so it holds none, and
// the younger is masked.
func maskedByAWinnerWithoutAnEntry(t *testing.T, api *fake.EntryAPI, s *Syncer) (old, young Owner, e entries.Entry) {
	t.Helper()
	ctx := context.Background()
	old, young = owner("old", time.Hour), owner("young", 0)
	e = entry("/ns/a/sa/x", 0)
	api.FailOnce[e.SpiffeID.String()] = codes.Unavailable
	if _, err := s.Sync(ctx, old, ptrs([]entries.Entry{e}), nil); err == nil {
		t.Fatalf("setup: the older owner's create must fail")
	}
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: the younger owner must be masked by the older: %v %+v", err, out)
	}
	return old, young, e
}
