package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestOrphanCollectionHandsNothingToAnOwnerItConfirmedGone: three owners
// render one entry: first (oldest) holds it, second and third are masked.
// first and second are both deleted with their finalizers removed by hand
// (or second's Delete pass failed before its finalizer was removed by hand);
// the controller has not yet run Forget for second. Orphan collection in
// third's pass confirms, with a live read, that first and second are gone,
// deletes first's entry and hands it over "to the object that wants it" in
// the same call. It must not hand it to second, an owner the very same
// AliveNow read just reported gone: that entry is a new orphan, and third
// (the live claimant) stays masked until a later read collects it again.
func TestOrphanCollectionHandsNothingToAnOwnerItConfirmedGone(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	first, second, third := owner("first", 2*time.Hour), owner("second", time.Hour), owner("third", 0)
	live := newLiveOwners(first, second, third)
	s, c := newCollectingSyncer(api, live)
	e := entry("/ns/a/sa/x", 0)
	for i, o := range []Owner{first, second, third} {
		out, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil)
		if err != nil || (i > 0) != (len(out.Masked) == 1) {
			t.Fatalf("setup %s: %v %+v", o.Name, err, out)
		}
	}
	live.gone(first)
	live.gone(second)

	// third's next pass, once the view is due, collects first's entry.
	c.Add(2 * time.Minute)
	if _, err := s.Sync(ctx, third, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	secondID := s.opts.IDs.EntryID(second.Tag(), e.Key())
	if api.Get(secondID) != nil {
		t.Errorf("orphan collection confirmed %s gone, then created %s for it (the entry of %s handed to a dead owner): writes %v",
			second.Name, secondID, first.Name, api.Writes())
	}
	// third's next pass (no new read: the view is fresh) must hold its entry.
	out, err := s.Sync(ctx, third, ptrs([]entries.Entry{e}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if api.Get(s.opts.IDs.EntryID(third.Tag(), e.Key())) == nil {
		t.Errorf("the only live claimant %s has no entry after the collection and a pass of its own (masked %v); SPIRE: %v",
			third.Name, out.Masked, api.All())
	}
	// The controller's Forget of both gone owners comes later and changes
	// nothing: third keeps its entry.
	s.Forget(first.Kind, first.Name)
	s.Forget(second.Kind, second.Name)
	if out, err := s.Sync(ctx, third, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 0 ||
		api.Get(s.opts.IDs.EntryID(third.Tag(), e.Key())) == nil {
		t.Errorf("after both gone owners were forgotten, %s: %v, masked %v; SPIRE holds %v", third.Name, err, out.Masked, api.All())
	}
}
