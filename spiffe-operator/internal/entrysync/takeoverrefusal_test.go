package entrysync

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// sharedByYounger sets up one entry that a younger object holds and an
// older object, known to the syncer, comes to want with its own fields
// (e): the older object's pass takes it over. It returns the syncer, the
// older object and the ID of the younger object's entry.
func sharedByYounger(t *testing.T, api *fake.EntryAPI, e entries.Entry) (*Syncer, Owner, string) {
	t.Helper()
	s := withPods(api, podW())
	ctx := context.Background()
	older, younger := owner("older", time.Hour), owner("younger", 0)
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	held := named("/shared", "a", "sa", "app", "web")
	out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{held}), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := out.Registered[held.Key()]
	if !ok || len(api.All()) != 1 {
		t.Fatalf("setup: the younger object holds no entry: %v", api.All())
	}
	if e.Key() != held.Key() {
		t.Fatalf("setup: the older object's entry has another key")
	}
	return s, older, id
}

// TestATakeoverSpireRefusesLeavesTheHoldersEntryInPlace: a younger object
// holds an entry; an older one comes to render the same entry but
// federating with a trust domain whose bundle SPIRE lacks. SPIRE refuses
// the older object's fields, so taking the entry over (delete, then
// create) would leave the pods with no entry for as long as the refusal
// lasts. The holder's entry must stay, never deleted, and the refusal be
// reported on the older object; once SPIRE has the bundle, the older
// object takes the entry over.
func TestATakeoverSpireRefusesLeavesTheHoldersEntryInPlace(t *testing.T) {
	api := fake.New()
	api.MissingBundles["other.test"] = true
	e := named("/shared", "a", "sa", "app", "web")
	e.FederatesWith = []string{"other.test"}
	e.Normalize()
	s, older, held := sharedByYounger(t, api, e)
	ctx := context.Background()
	for range 2 {
		out, _ := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
		if api.Get(held) == nil {
			t.Fatalf("SPIRE refuses the older object's entry, yet the holder's entry went: the pods have none (entries %v, log %v)",
				api.All(), api.Log)
		}
		if !slices.ContainsFunc(out.Failed, func(f Failed) bool { return f.Reason == ReasonFederatedBundleMissing }) {
			t.Errorf("the refusal is not reported on the older object: failed %+v", out.Failed)
		}
	}
	if slices.Contains(api.Log, "delete "+held) {
		t.Errorf("the holder's entry was deleted while SPIRE refused what replaces it: log %v", api.Log)
	}
	delete(api.MissingBundles, "other.test")
	out, err := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := out.Registered[e.Key()]
	if !ok || id == held || api.Get(id) == nil || api.Get(held) != nil {
		t.Errorf("with the bundle there, the older object did not take the entry over: registered %q, entries %v", id, api.All())
	}
	if got := api.Get(id); got != nil && !slices.Equal(got.FederatesWith, []string{"other.test"}) {
		t.Errorf("the taken-over entry federates with %v, want [other.test]", got.FederatesWith)
	}
}

// TestATakeoverWhoseCreateFailsPutsTheHoldersEntryBack: the older object
// renders the entry exactly as its holder does, so there is nothing to
// check first, and the create after the delete fails (a datastore error).
// The holder's entry must be put back, with its ID and fields, rather than
// leave the pods without an entry until a pass succeeds.
func TestATakeoverWhoseCreateFailsPutsTheHoldersEntryBack(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	s, older, held := sharedByYounger(t, api, e)
	was := api.Get(held)
	api.FailOnce[e.SpiffeID.String()] = codes.Internal
	if _, err := s.Sync(context.Background(), older, ptrs([]entries.Entry{e}), nil); err == nil {
		t.Errorf("a failed create reported no error")
	}
	got := api.Get(held)
	if got == nil {
		t.Fatalf("the takeover's create failed and the holder's entry is gone: the pods have none (entries %v, log %v)",
			api.All(), api.Log)
	}
	if got.SpiffeId.Path != was.SpiffeId.Path || got.ParentId.Path != was.ParentId.Path || len(got.Selectors) != len(was.Selectors) {
		t.Errorf("the entry put back is %v, want %v", got, was)
	}
	out, err := s.Sync(context.Background(), older, ptrs([]entries.Entry{e}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if id := out.Registered[e.Key()]; id == held || api.Get(id) == nil || len(api.All()) != 1 {
		t.Errorf("once SPIRE creates again, the older object did not take the entry over: registered %q, entries %v", id, api.All())
	}
}
