package spifferegistration

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// sqlIDs answers as spire-server 1.13.3 with its SQL datastore does a create
// whose entry ID a dissimilar entry already has: AlreadyExists, without an
// entry.
type sqlIDs struct{ *spirefake.EntryAPI }

func (u sqlIDs) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	var pass []*types.Entry
	idx := map[int]int{}
	out := make([]spire.Result, len(in))
	for i, e := range in {
		if have := u.Get(e.Id); have != nil {
			a, errA := entries.FromProto(have)
			b, errB := entries.FromProto(e)
			if errA == nil && errB == nil && a.Key() != b.Key() {
				out[i] = spire.Result{Code: codes.AlreadyExists,
					Message: "failed to create entry: datastore-sql: UNIQUE constraint failed: registered_entries.entry_id"}
				continue
			}
		}
		idx[len(pass)] = i
		pass = append(pass, e)
	}
	res, err := u.EntryAPI.Create(ctx, pass)
	for j, r := range res {
		out[idx[j]] = r
	}
	return out, err
}

// A policy whose entry's ID is held by an entry made by hand under another
// parent never gets its entry made. The pass must not end as a success
// (Ready) with the entry neither registered nor reported failed.
func TestAPolicyWhoseEntryIDIsTakenByAHandMadeEntryIsNotReady(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	e.h.Syncer = entrysync.New(sqlIDs{e.api}, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	p := newPolicy(nil)
	want := entries.Entry{
		SpiffeID:    spiffeid.RequireFromString("spiffe://example.org/ns/a/sa/shop"),
		ParentID:    spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors:   []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: "sa:shop"}},
		X509SVIDTTL: 3600,
	}
	want.Normalize()
	id := entries.IDScheme{Prefix: "trustplane."}.EntryIDFor(entries.OwnerTag(p.UID), &want)
	squat := want
	squat.ParentID = spiffeid.RequireFromString("spiffe://example.org/elsewhere")
	squat.SpiffeID = spiffeid.RequireFromString("spiffe://example.org/hand/made")
	squat.Normalize()
	e.api.Put(squat.Proto(id))

	err := e.h.CreateOrUpdate(ctx, p)
	for _, x := range e.api.All() {
		if x.ParentId.Path == "/agent" {
			return
		}
	}
	if err == nil {
		t.Errorf("the pass succeeds (Ready) while SPIRE holds no entry for Deployment a/web: desired %d, registered %d, failed %d, failures %v",
			p.Status.EntriesDesired, p.Status.EntriesRegistered, p.Status.EntriesFailed, p.Status.Failures)
	}
}
