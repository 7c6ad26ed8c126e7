package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestATakeoverProbeSpireRefusesLeavesTheHoldersGrants: young holds an
// entry with an admin grant; old, created earlier, comes to render the
// same key federating with a trust domain SPIRE holds no bundle of, which
// SPIRE refuses. The takeover is dropped, and the entry must stay as young
// has it: before, the refused probe was "trimmed" to old's grants, and
// young's pods lost admin while old never got the entry.
func TestATakeoverProbeSpireRefusesLeavesTheHoldersGrants(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	young.Grants = entries.Grants{Admin: true}
	e := entry("/ns/a/sa/x", 30)
	e.Admin = true
	if _, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	id := s.opts.IDs.EntryID(young.Tag(), e.Key())
	mine := entry("/ns/a/sa/x", 60)
	mine.FederatesWith = []string{"nobundle.test"}
	api.MissingBundles["nobundle.test"] = true
	if out, err := s.Sync(ctx, old, ptrs([]entries.Entry{mine}), nil); err == nil && len(out.Failed) == 0 {
		t.Fatalf("old's pass reported no refusal: %+v", out)
	}
	if got := api.Get(id); got == nil || !got.Admin || got.X509SvidTtl != 30 || len(got.FederatesWith) != 0 {
		t.Errorf("a refused takeover changed the holder's entry: %v (writes %v)", api.All(), api.Writes())
	}
	// Young's pass keeps it as it is: nothing to restore.
	before := len(api.Writes())
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("young's pass: %v, %+v", err, out)
	}
	if w := api.Writes()[before:]; len(w) != 0 {
		t.Errorf("young's pass after the refused takeover wrote %v", w)
	}
}
