package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestOrphanCollectionNeverRecreatesTheEntryOfTheOwnerItCollects: first
// holds an entry, third is masked. first's Delete pass is releasing it
// (its SPIRE delete in flight) when its finalizer is removed by hand, so
// first is gone from the API. third's pass reads the parent and collects
// first's entry; as first is "releasing", deleteOrphans keeps its claims,
// and handOver then gives the entry it just deleted to the key's winner:
// first itself. SPIRE must never be asked to create an entry under the
// tag of an owner AliveNow just confirmed gone.
func TestOrphanCollectionNeverRecreatesTheEntryOfTheOwnerItCollects(t *testing.T) {
	api := &slowList{EntryAPI: fake.New()}
	ctx := context.Background()
	first, third := owner("first", 2*time.Hour), owner("third", 0)
	live := newLiveOwners(first, third)
	s, c := newCollectingSyncer(api, live)
	e := entry("/ns/a/sa/x", 0)
	if _, err := s.Sync(ctx, first, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, third, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: %v %+v", err, out)
	}
	firstID := s.opts.IDs.EntryID(first.Tag(), e.Key())
	before := len(api.Writes())
	api.onDelete = func() {
		// first's release is deleting; its finalizer goes by hand.
		live.gone(first)
		c.Add(2 * time.Minute)
		if _, err := s.Sync(ctx, third, ptrs([]entries.Entry{e}), nil); err != nil {
			t.Errorf("third's pass: %v", err)
		}
	}
	if err := s.Release(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range api.Writes()[before:] {
		if strings.HasPrefix(w, "create ") && strings.Contains(w, firstID) {
			t.Errorf("orphan collection re-created %s, the entry of %s which it had just confirmed gone and deleted: writes %v",
				firstID, first.Name, api.Writes()[before:])
		}
	}
	if api.Get(firstID) != nil {
		t.Errorf("SPIRE still holds the entry of the gone owner %s", first.Name)
	}
	if api.Get(s.opts.IDs.EntryID(third.Tag(), e.Key())) == nil {
		t.Errorf("third has no entry after first's release: %v", api.All())
	}
}
