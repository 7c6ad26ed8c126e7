package entrysync

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// prefixPolicy is a SPIRE (before 1.8: it ignores the entry IDs it is
// given for the SPIFFE ID paths in renames) behind an authorization policy
// that lets the operator delete only the entries under its own entry-ID
// prefix ("trustplane."): a delete naming any other ID is denied as a
// whole (PermissionDenied). Such a policy is the natural way to confine an
// operator to the entries it made; it makes an entry SPIRE renamed
// undeletable for good.
type prefixPolicy struct {
	*renamesPaths
	denied int
}

// renamesPaths is a SPIRE that ignores the entry IDs it is given for the
// entries whose SPIFFE ID paths renames holds (as a server before 1.8
// does), and keeps the others'.
type renamesPaths struct {
	*fake.EntryAPI
	mu      sync.Mutex
	renames map[string]bool
}

func (p *renamesPaths) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []spire.Result
	for _, e := range in {
		p.IgnoreIDs = p.renames[e.GetSpiffeId().GetPath()]
		r, err := p.EntryAPI.Create(ctx, []*types.Entry{e})
		p.IgnoreIDs = false
		if err != nil {
			return r, err
		}
		out = append(out, r...)
	}
	return out, nil
}

func (p *prefixPolicy) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	for _, id := range ids {
		if !strings.HasPrefix(id, "trustplane.") {
			p.mu.Lock()
			p.denied++
			p.mu.Unlock()
			err := status.Error(codes.PermissionDenied, "authorization policy: the operator may delete only entries with IDs prefixed trustplane. (fake)")
			out := make([]spire.Result, len(ids))
			for i := range out {
				out[i] = spire.Result{Code: codes.PermissionDenied, Message: err.Error()}
			}
			return out, err
		}
	}
	return p.EntryAPI.Delete(ctx, ids)
}

// TestAnUndeletableRenamedEntryOfAnotherOwnerDoesNotStopAPassesWithdrawals:
// owner "renamed" has one entry created on a SPIRE that ignores entry IDs
// for it; the delete of the renamed entry is denied (prefixPolicy), so
// b31577b keeps it in Syncer.renamed and retries it at every later pass,
// of every owner. Owner "tenant", which has nothing to do with it, then
// withdraws an identity (its entry /b2 is no longer wanted) and revokes
// the admin grant of /b1, in passes that also create a new entry (/b3,
// which SPIRE refuses every time: a tenant's own broken render).
// execute calls deleteRenamed(renamed of this pass = none), which now
// retries the other owner's pending delete, fails, and execute returns
// early on renameErr ("if renameErr != nil { return ... }"), before
// updateAll and deleteStale: the withdrawn identity /b2 stays registered
// and /b1 keeps admin, pass after pass, for as long as the unrelated
// delete is denied (forever under such a policy). b31577b^ had no pending
// set: deleteAll(nil) of a pass that renamed nothing returned nil and the
// pass made its withdrawals. New in b31577b.
func TestAnUndeletableRenamedEntryOfAnotherOwnerDoesNotStopAPassesWithdrawals(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	pol := &prefixPolicy{renamesPaths: &renamesPaths{EntryAPI: api, renames: map[string]bool{"/renamed": true}}}
	s := New(pol, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})

	// The tenant's first state: b1 (admin) and b2.
	b1 := named("/b1", "t", "sa", "app", "b1")
	b1.Admin = true
	b2 := named("/b2", "t", "sa", "app", "b2")
	tenant := owner("tenant", time.Hour)
	if _, err := s.Sync(ctx, tenant, ptrs([]entries.Entry{b1, b2}), nil); err != nil {
		t.Fatalf("setup: tenant's first pass: %v", err)
	}

	// Another owner's entry is renamed by SPIRE; its delete is denied.
	other := owner("other", 0)
	r := named("/renamed", "o", "sa", "app", "r")
	_, err := s.Sync(ctx, other, ptrs([]entries.Entry{r}), nil)
	t.Logf("other owner's pass (renamed create, delete denied): %v", err)
	if pol.denied == 0 {
		t.Fatalf("setup: no delete of a renamed entry was denied")
	}

	// The tenant withdraws /b2 and the admin grant of /b1, and adds /b3.
	b1.Admin = false
	b1.Normalize()
	// /b3 is an entry SPIRE refuses (InvalidArgument), every time: a
	// tenant's own render that fails, so each of its passes creates.
	b3 := named("/b3", "t", "sa", "app", "b3")
	api.Reject["spiffe://example.org/b3"] = true
	var out Outcome
	for i := 0; i < 3; i++ {
		out, err = s.Sync(ctx, tenant, ptrs([]entries.Entry{b1, b3}), nil)
	}
	t.Logf("tenant's withdrawal pass: %v; registered %v", err, out.Registered)
	var admin bool
	for _, e := range api.All() {
		if e.SpiffeId.Path == "/b1" {
			admin = e.Admin
		}
	}
	if holdsPath(api, "/b2") || admin {
		t.Errorf("the tenant withdrew /b2 and /b1's admin grant in passes that also create /b3 (refused by SPIRE each time); after 3 passes SPIRE still holds "+
			"/b2: %v, /b1 with admin: %v. execute returned early on the error of deleteRenamed, which retried another owner's "+
			"pending delete of an entry SPIRE renamed (denied by policy), before its updates and stale deletes: one undeletable "+
			"renamed entry anywhere stops every owner's withdrawals in every pass that creates (pass error: %v). b31577b^ did not "+
			"have it (no pending set; a pass that renamed nothing deleted nothing there)", holdsPath(api, "/b2"), admin, err)
	}
}

// TestAnUndeletableRenamedEntryFailsEveryPassOfEveryOwner: as above, but
// the owner looked at ("bystander") changes nothing: its pass has nothing
// to do and does all of it. b31577b's finish joins deleteRenamed's error
// (the other owner's pending entry) into every pass, so the bystander's
// pass fails, forever; its handler maps the error through SpireError
// (spifferegistration/handler.go) to ReasonSpirePermissionDenied (the
// status code of the policy's denial) and requeues it with backoff: every
// object in the cluster reports that it lost SPIRE's permission for an
// entry that is not its own, and each requeue sends the denied delete
// again. The Outcome also says Talked=false although the pass called
// SPIRE. b31577b^: the bystander's pass returned nil. New in b31577b.
func TestAnUndeletableRenamedEntryFailsEveryPassOfEveryOwner(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	pol := &prefixPolicy{renamesPaths: &renamesPaths{EntryAPI: api, renames: map[string]bool{"/renamed": true}}}
	s := New(pol, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})

	bystander := owner("bystander", time.Hour)
	b := named("/b", "t", "sa", "app", "b")
	if _, err := s.Sync(ctx, bystander, ptrs([]entries.Entry{b}), nil); err != nil {
		t.Fatalf("setup: bystander's first pass: %v", err)
	}
	other := owner("other", 0)
	_, _ = s.Sync(ctx, other, ptrs([]entries.Entry{named("/renamed", "o", "sa", "app", "r")}), nil)
	if pol.denied == 0 {
		t.Fatalf("setup: no delete of a renamed entry was denied")
	}
	before := pol.denied
	var (
		out Outcome
		err error
	)
	for i := 0; i < 5; i++ {
		out, err = s.Sync(ctx, bystander, ptrs([]entries.Entry{b}), nil)
	}
	if err != nil {
		t.Errorf("the bystander's pass had nothing to do and SPIRE holds its entry (registered %v), yet after 5 passes it still "+
			"fails with %q (gRPC code %s, so SpireError reports ReasonSpirePermissionDenied and requeues it; ErrDeleteRefused %v), "+
			"the error of another owner's pending delete of an entry SPIRE renamed; %d more denied deletes were sent by its "+
			"passes; Talked=%v. Every object of every tenant fails this way for as long as that one delete fails. b31577b^: nil",
			out.Registered, err, status.Code(err), errors.Is(err, ErrDeleteRefused), pol.denied-before, out.Talked)
	}
}
