package entrysync

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// failsOneDelete is a SPIRE whose BatchDeleteEntry answers one entry ID
// with a datastore error (Internal, as SPIRE answers a SQLite "database is
// locked" or a failed transaction), deleting the others of the call.
type failsOneDelete struct {
	*fake.EntryAPI
	failID string
}

func (f *failsOneDelete) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	out := make([]spire.Result, len(ids))
	for i, id := range ids {
		if id == f.failID {
			out[i] = spire.Result{Code: codes.Internal, Message: "failed to delete entry: datastore error (fake)"}
			continue
		}
		res, err := f.EntryAPI.Delete(ctx, []string{id})
		if err != nil {
			return nil, err
		}
		out[i] = res[0]
	}
	return out, nil
}

// TestATakeoverWhoseDeleteFailsInPartReplacesWhatItDeleted: a younger
// policy holds the entries of two service accounts; an older policy comes
// to want the same entries (a namespace gets the label it selects on), so
// its pass takes both over: delete the holder's entries, then create its
// own. SPIRE fails the delete of one of them for a cause that may pass.
// The entry whose delete succeeded is created for the older policy in the
// same pass, and the pass fails for the other, which stays the holder's;
// on the retry, while that delete keeps failing, nothing else waits
// behind it. On the old code the pass stopped at the failed delete, and
// the running pods of the other account had no entry until a pass
// succeeded.
func TestATakeoverWhoseDeleteFailsInPartReplacesWhatItDeleted(t *testing.T) {
	ctx := context.Background()
	api := &failsOneDelete{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	older, younger := owner("older", time.Hour), owner("younger", 0)
	web, apiSA := saEntry("n", "web"), saEntry("n", "api")
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{web, apiSA}), nil)
	if err != nil || len(out.Registered) != 2 {
		t.Fatalf("setup: the younger policy must hold both entries: %v, %+v", err, out)
	}
	api.failID = out.Registered[apiSA.Key()]

	_, err = s.Sync(ctx, older, ptrs([]entries.Entry{web, apiSA}), nil)
	if err == nil {
		t.Fatal("setup: the failed delete reported no error")
	}
	for _, e := range []entries.Entry{web, apiSA} {
		if !holdsPath(api.EntryAPI, e.SpiffeID.Path()) {
			t.Errorf("both policies want %s and its pods run, yet after the takeover pass failed on another entry's delete (%v) "+
				"SPIRE holds no entry of it until a pass succeeds; writes %v", e.SpiffeID, err, api.Writes())
		}
	}
	// The retry (the view was invalidated, so SPIRE is read again) takes
	// over apiSA again before it creates anything: while that one delete
	// keeps failing, web's entry is not created either.
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{web, apiSA}), nil); err == nil {
		t.Fatal("setup: the failed delete reported no error on the retry")
	}
	if !holdsPath(api.EntryAPI, web.SpiffeID.Path()) {
		t.Errorf("the retry did not create %s either: its create waits behind another account's failing delete", web.SpiffeID)
	}
}
