package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestATakeoversCreateProbeSpireRenamesLeaksNoEntry: a younger object
// holds /shared; an older one comes to want the same key with the same
// fields (no probe update), so da6a1db's create probe sends the holder's
// entry "as it is" before the delete. The holder's entry was deleted from
// SPIRE since the view was read (by hand, or by a concurrent pass), so the
// probe is not answered AlreadyExists: SPIRE creates it. The create call
// lands on a server that ignores entry IDs (renamesOnce: the rolling
// upgrade TestATakeoverCreateSpireRenamesStillPutsTheHoldersEntryBack
// models), so SPIRE stores it under an ID of its own. takeOver ignores
// the probe's per-entry results, so nobody deletes that entry: the
// takeover's delete finds the holder's ID gone, the older object's create
// is answered AlreadyExists with the server-named entry and is reported
// masked by a foreign entry, and once every owner withdraws the key, the
// identity stays registered (the operator made the entry but can never
// delete it; orphan collection only knows its own IDs). Every other create
// path (execute's creates, putBack) deletes what SPIRE renamed. da6a1db^
// sent no probe: the takeover's create registered the older object's
// entry under its own ID.
func TestATakeoversCreateProbeSpireRenamesLeaksNoEntry(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	ctx := context.Background()
	// No pod source: a withdrawn entry goes at once (no retention).
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	older, younger := owner("older", time.Hour), owner("younger", 0)
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	yout, err := s.Sync(ctx, younger, ptrs([]entries.Entry{e}), nil)
	held, ok := yout.Registered[e.Key()]
	if err != nil || !ok {
		t.Fatalf("setup: the younger object holds no entry: %v, %+v", err, yout)
	}
	// Gone from SPIRE since the view was read (the view is fresh for an hour).
	api.Remove(held)
	s.api = &renamesOnce{EntryAPI: api}
	out, err := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	t.Logf("takeover pass: %v, registered %v, masked %+v, failed %+v", err, out.Registered, out.Masked, out.Failed)
	var leaked []string
	for _, x := range api.All() {
		if !strings.HasPrefix(x.Id, "trustplane.") {
			leaked = append(leaked, x.Id)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the takeover's create probe re-created the holder's entry (gone from SPIRE) on a server that ignores "+
			"entry IDs, and nothing deleted it: SPIRE holds %v, an entry no owner can delete (pass: %v, registered %v, "+
			"masked %+v, writes %v)", leaked, err, out.Registered, out.Masked, api.Writes())
	}
	// Every owner withdraws the key: its identity must go.
	for i := 0; i < 2; i++ {
		_, _ = s.Sync(ctx, older, nil, nil)
		_, _ = s.Sync(ctx, younger, nil, nil)
	}
	if holdsPath(api, "/shared") {
		t.Errorf("every owner withdrew /shared, yet SPIRE still holds it: %v (writes %v)", api.All(), api.Writes())
	}
}
