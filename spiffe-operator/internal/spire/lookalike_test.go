package spire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// Against a real spire-server: an entry made by hand (by any SPIRE admin)
// with exactly the ID the operator will give a wanted entry, under another
// parent ID and for another identity. spire-server answers the operator's
// create AlreadyExists without an entry (the unique index on entry_id). The
// passes must end with SPIRE holding the wanted entry, or report that they
// could not make it: they must neither count the entry registered while
// SPIRE lacks it, nor take the conflict for an outage retried forever, nor
// end without error and without a word about the entry.
func TestAHandMadeEntryHoldingTheWantedIDIsResolvedOrReportedAgainstSpire(t *testing.T) {
	ctx := context.Background()
	c := spire.NewClient(spireConn(ctx, t), spire.Options{})
	ids := entries.IDScheme{Prefix: "team."}
	owner := entrysync.Owner{Kind: "SpiffeRegistration", Name: "p", UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", Created: time.Now()}
	want := entries.Entry{
		SpiffeID:  spiffeid.RequireFromString("spiffe://example.org/ns/a/sa/web"),
		ParentID:  spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: "sa:web"}},
	}
	want.Normalize()
	id := ids.EntryIDFor(owner.Tag(), &want)
	squat := want
	squat.ParentID = spiffeid.RequireFromString("spiffe://example.org/elsewhere")
	squat.SpiffeID = spiffeid.RequireFromString("spiffe://example.org/hand/made")
	squat.Normalize()
	res, err := c.Create(ctx, []*types.Entry{squat.Proto(id)})
	if err != nil || res[0].Code != 0 {
		t.Fatalf("hand-made entry: %v %v", res, err)
	}

	probe, perr := c.Create(ctx, []*types.Entry{want.Proto(id)})
	for _, r := range probe {
		t.Logf("a create of the wanted entry under its ID: code %v, message %q, entry %v (err %v)", r.Code, r.Message, r.Entry, perr)
	}
	s := entrysync.New(c, entrysync.Options{IDs: ids, ResyncInterval: time.Hour})
	for pass := 1; pass <= 3; pass++ {
		out, err := s.Sync(ctx, owner, []*entries.Entry{&want}, nil)
		t.Logf("pass %d: registered %v, failed %v, masked %v, err %v", pass, out.Registered, out.Failed, out.Masked, err)
		list, lerr := c.ListByParent(ctx, want.ParentID)
		if lerr != nil {
			t.Fatal(lerr)
		}
		for _, p := range list {
			if e, err := entries.FromProto(p); err == nil && e.Key() == want.Key() {
				return
			}
		}
		if _, ok := out.Registered[want.Key()]; ok {
			t.Errorf("pass %d: the entry counts as registered while SPIRE holds none under %s", pass, want.ParentID)
		}
		if errors.Is(err, entrysync.ErrTransient) {
			t.Errorf("pass %d: SPIRE holds no entry under %s, and the pass reports a transient failure, retried forever: %v", pass, want.ParentID, err)
		}
		if err == nil && len(out.Failed) == 0 && len(out.Masked) == 0 {
			t.Errorf("pass %d ends without error and without a failure or masked entry, and SPIRE holds no entry for %s under %s",
				pass, want.SpiffeID, want.ParentID)
		}
	}
}
