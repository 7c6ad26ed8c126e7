package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// renamesOnceFailsItsDelete is renamesOnce whose first delete naming an
// entry of SPIRE's own ID fails as a whole (Unavailable: a blip).
type renamesOnceFailsItsDelete struct {
	renamesOnce
	failed bool
}

func (r *renamesOnceFailsItsDelete) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	for _, id := range ids {
		if !r.failed && !strings.HasPrefix(id, "trustplane.") {
			r.failed = true
			err := status.Error(codes.Unavailable, "connection reset (fake)")
			out := make([]spire.Result, len(ids))
			for i := range out {
				out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
			}
			return out, err
		}
	}
	return r.renamesOnce.Delete(ctx, ids)
}

// TestAProbeRenamedEntryWhoseDeleteFailsOnceIsNotLeaked: as
// TestATakeoversCreateProbeSpireRenamesLeaksNoEntry (held entry gone, the
// probe lands on a SPIRE that ignores entry IDs), but the delete f00f343
// sends for the renamed entry fails once, as a whole (a connection
// blip). takeOver joins the error and goes on: it deletes the held ID
// (NotFound), and the older object's create is answered AlreadyExists with
// the renamed entry, which looks foreign. The renamed ID is recorded
// nowhere, so no retry deletes it: the older object is reported masked by
// a foreign entry the operator itself made, for good, and once every owner
// withdraws the key its identity stays registered. One failed delete
// turns the fix into a permanent leak. New code path in f00f343 (it
// copies execute's rename handling, which has the same one-shot delete).
func TestAProbeRenamedEntryWhoseDeleteFailsOnceIsNotLeaked(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	ctx := context.Background()
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
	api.Remove(held)
	s.api = &renamesOnceFailsItsDelete{renamesOnce: renamesOnce{EntryAPI: api}}
	out, err := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	t.Logf("takeover pass: %v, registered %v, masked %+v", err, out.Registered, out.Masked)
	// The pass failed: it is retried (a few times).
	for i := 0; i < 3; i++ {
		out, err = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	}
	t.Logf("after retries: %v, registered %v, masked %+v", err, out.Registered, out.Masked)
	if leaked := foreignIDs(api); len(leaked) > 0 {
		t.Errorf("the probe re-created the gone held entry under SPIRE's own ID and its delete failed once: after 3 retried "+
			"passes SPIRE still holds %v, which the operator made and no longer knows (older object: registered %v, "+
			"masked %+v)", leaked, out.Registered, out.Masked)
	}
	for i := 0; i < 2; i++ {
		_, _ = s.Sync(ctx, older, nil, nil)
		_, _ = s.Sync(ctx, younger, nil, nil)
	}
	if holdsPath(api, "/shared") {
		t.Errorf("every owner withdrew /shared, yet SPIRE still holds it: %v", foreignIDs(api))
	}
}
