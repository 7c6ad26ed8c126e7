package entrysync

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// batchPolicy is a SPIRE that ignores entry IDs for creates of the paths in
// renames, denies as a whole (PermissionDenied, as an OPA policy on the
// request does) any delete naming an entry of path deny, and fails the
// first delete of an entry of path once per item (Internal).
type batchPolicy struct {
	*renamesPaths
	deny   string
	once   string
	failed bool
}

func (p *batchPolicy) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	p.mu.Lock()
	out := make([]spire.Result, len(ids))
	for _, id := range ids {
		if e := p.Get(id); e != nil && e.SpiffeId.Path == p.deny {
			p.mu.Unlock()
			err := status.Error(codes.PermissionDenied, "authorization policy: entries of "+p.deny+" may not be deleted (fake)")
			for i := range out {
				out[i] = spire.Result{Code: codes.PermissionDenied, Message: err.Error()}
			}
			return out, err
		}
	}
	var rest []string
	var at []int
	for i, id := range ids {
		if e := p.Get(id); e != nil && e.SpiffeId.Path == p.once && !p.failed {
			p.failed = true
			out[i] = spire.Result{Code: codes.Internal, Message: "datastore error (fake)"}
			continue
		}
		rest = append(rest, id)
		at = append(at, i)
	}
	p.mu.Unlock()
	res, err := p.EntryAPI.Delete(ctx, rest)
	for j, i := range at {
		if j < len(res) {
			out[i] = res[j]
		}
	}
	return out, err
}

// TestAnotherOwnersUndeletableRenamedEntryDoesNotFailAPass: owner y's
// entry was created by SPIRE under an ID of its own, and a policy denies
// its delete as a whole call; owner x's renamed entry failed its delete
// once (Internal) and is kept. A minute later x's pass (with nothing else
// to write) retries, from finish, x's kept entry and, being the first pass
// past renamedRetry, every owner's, in one Delete call: the policy denies
// the whole call for y's entry, and x's pass fails with y's
// PermissionDenied (reason SpirePermissionDenied: "register the operator
// as an admin"), although x's own delete, alone, succeeds. aee2442 made
// finish's error count (aee2442^ dropped it; its execute did the same
// batching, so a pass that wrote had it before).
func TestAnotherOwnersUndeletableRenamedEntryDoesNotFailAPass(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	pol := &batchPolicy{renamesPaths: &renamesPaths{EntryAPI: api, renames: map[string]bool{"/x": true, "/y": true}}, deny: "/y", once: "/x"}
	c := &clock{now: t0}
	s := New(pol, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Now: c.Now})
	x, y := owner("x", time.Hour), owner("y", 0)
	ex := named("/x", "a", "sa", "app", "x")
	ey := named("/y", "b", "sa", "app", "y")
	_, errX := s.Sync(ctx, x, ptrs([]entries.Entry{ex}), nil)
	_, errY := s.Sync(ctx, y, ptrs([]entries.Entry{ey}), nil)
	t.Logf("setup passes: x %v; y %v", errX, errY)
	if !pol.failed {
		t.Fatalf("setup: x's renamed entry's delete was not tried: %v", api.Log)
	}
	s.mu.Lock()
	kept := len(s.renamed)
	s.mu.Unlock()
	if kept != 2 {
		t.Fatalf("setup: %d renamed entries kept, want x's and y's", kept)
	}
	c.Add(2 * renamedRetry)
	_, err := s.Sync(ctx, x, ptrs([]entries.Entry{ex}), nil)
	if status.Code(err) == codes.PermissionDenied {
		t.Errorf("x's pass fails with PermissionDenied (reason SpirePermissionDenied) because its retry of its own kept renamed "+
			"entry was batched with y's, whose delete a policy denies as a whole call; x's delete alone would have "+
			"succeeded: %v. New for passes with nothing to write in aee2442 (finish's error now returned)", err)
	}
}
