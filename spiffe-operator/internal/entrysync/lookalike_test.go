package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// holds reports whether SPIRE holds an entry with e's parent ID, SPIFFE ID
// and selectors, whatever its ID.
func holds(api *fake.EntryAPI, e entries.Entry) bool {
	for _, p := range api.All() {
		have, err := entries.FromProto(p)
		if err == nil && have.Key() == e.Key() {
			return true
		}
	}
	return false
}

// An entry made by hand (by any SPIRE admin) with exactly the ID the
// operator will give a wanted entry, but under another parent ID (which no
// pass reads) and for another identity. Every pass must end with SPIRE
// holding the wanted entry, or say that it does not (a failure, a masked
// entry or an error): a pass that ends without error and without a word
// about the entry is a silent success, and the workload never gets it.
func TestAHandMadeEntryHoldingTheWantedIDDoesNotSilentlyKeepTheEntryFromBeingMade(t *testing.T) {
	base := fake.New()
	c := &clock{now: t0}
	s := New(base, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Now: c.Now})
	ctx := context.Background()
	o := owner("a", 0)
	want := entry("/ns/a/sa/x", 3600)
	id := entries.IDScheme{Prefix: "trustplane."}.EntryIDFor(o.Tag(), &want)

	squat := want
	squat.ParentID = spiffeid.RequireFromString("spiffe://example.org/elsewhere")
	squat.SpiffeID = spiffeid.RequireFromString("spiffe://example.org/hand/made")
	squat.Normalize()
	base.Put(squat.Proto(id))

	for pass := 1; pass <= 3; pass++ {
		out, err := s.Sync(ctx, o, ptrs([]entries.Entry{want}), nil)
		if holds(base, want) {
			return
		}
		if got, ok := out.Registered[want.Key()]; ok {
			t.Errorf("pass %d: the entry counts as registered (as %s) while SPIRE holds none under %s", pass, got, want.ParentID)
		}
		if err == nil && len(out.Failed) == 0 && len(out.Masked) == 0 {
			t.Errorf("pass %d ends without error and without a failure or masked entry, and SPIRE holds no entry for %s under %s",
				pass, want.SpiffeID, want.ParentID)
		}
		c.Add(2 * time.Minute)
	}
}
