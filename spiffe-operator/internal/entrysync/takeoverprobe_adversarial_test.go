package entrysync

import (
	"context"
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

// TestACreateProbeSpireRefusesKeepsTheHoldersEntry: the older
// object renders the entry exactly as its younger holder has it (no update
// probe). SPIRE now refuses to create that entry (InvalidArgument: it
// validates creates, not the entries it already holds; e.g. a rule added by
// an upgrade). takeOver's create probe of the held entry "as it is" is
// answered InvalidArgument per item, not AlreadyExists: SPIRE says it will
// not re-create the held entry, so the put-back cannot work. takeOver looks
// only at OK-renamed results and a whole-call error, goes on, deletes the
// holder's entry, the create is refused, the put-back is refused: the pods
// lose their identity for as long as SPIRE refuses. Old: 9c20d03^ had no
// probe and deleted all the same; the probe added in da6a1db/f00f343 was
// meant to catch exactly "the put-back would fail" but ignores per-item codes.
func TestACreateProbeSpireRefusesKeepsTheHoldersEntry(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	s, older, held := sharedByYounger(t, api, e)
	api.Reject[e.SpiffeID.String()] = true
	ctx := context.Background()
	var out Outcome
	var err error
	for range 2 {
		out, err = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	}
	if api.Get(held) == nil && !holdsPath(api, "/shared") {
		t.Errorf("SPIRE answered the takeover's create probe of the holder's entry with InvalidArgument (it will not create "+
			"that entry), yet the takeover deleted the holder's entry %s; the create and the put-back were refused and no "+
			"entry of the key is left: the pods lost their identity while SPIRE refuses (pass error %v, failed %+v, log %v). "+
			"Old hole (9c20d03^ deleted without a probe); the probe ignores per-item answers", held, err, out.Failed, api.Log)
	}
}

// renamesHandOverOnce is a SPIRE that ignores entry IDs while ignore is
// set (a server not yet upgraded in a rolling upgrade), and fails the first
// delete naming an ID not made by the operator with Unavailable, as a
// whole (a blip).
type renamesHandOverOnce struct {
	*fake.EntryAPI
	mu     sync.Mutex
	ignore bool
	failed bool
}

func (r *renamesHandOverOnce) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	r.mu.Lock()
	r.IgnoreIDs = r.ignore
	r.mu.Unlock()
	defer func() { r.IgnoreIDs = false }()
	return r.EntryAPI.Create(ctx, in)
}

func (r *renamesHandOverOnce) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	r.mu.Lock()
	fail := false
	for _, id := range ids {
		if !strings.HasPrefix(id, "trustplane.") && !r.failed {
			fail, r.failed = true, true
		}
	}
	r.mu.Unlock()
	if fail {
		err := status.Error(codes.Unavailable, "connection reset (fake)")
		out := make([]spire.Result, len(ids))
		for i := range out {
			out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
		}
		return out, err
	}
	return r.EntryAPI.Delete(ctx, ids)
}

// TestAHandOverSpireRenamedWhoseDeleteFailedOnceIsNotLeaked: the older
// object a stops wanting an entry the younger object b also wants; a's
// pass deletes it and hands it over to b in the same pass (createFor).
// SPIRE creates b's entry under an ID of its own; createFor deletes it with
// deleteAll, and that delete fails once (Unavailable). b31577b/cf8e7da keep
// such entries in Syncer.renamed for a later try, but createFor does not
// use deleteRenamed: the entry is forgotten. Its ID is not the operator's,
// so orphan collection never deletes it, and b is masked by it as by a
// foreign entry forever. Old: 9c20d03^ createFor had the same deleteAll;
// the pending-rename fix of b31577b/cf8e7da missed the hand-over path.
func TestAHandOverSpireRenamedWhoseDeleteFailedOnceIsNotLeaked(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	r := &renamesHandOverOnce{EntryAPI: api}
	c := &clock{now: t0}
	s := New(r, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Now: c.Now})
	a, b := owner("a", time.Hour), owner("b", 0)
	e := named("/shared", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, a, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, b, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: b not masked by a: %+v, %v", out.Masked, err)
	}
	r.mu.Lock()
	r.ignore = true
	r.mu.Unlock()
	_, err := s.Sync(ctx, a, nil, nil)
	t.Logf("a's withdrawal pass (hand-over renamed, its delete fails once): %v", err)
	r.mu.Lock()
	r.ignore = false
	failed := r.failed
	r.mu.Unlock()
	if !failed {
		t.Fatalf("setup: the hand-over was not renamed or its delete not tried: log %v", api.Log)
	}
	var out Outcome
	for range 3 {
		c.Add(2 * renamedRetry)
		out, err = s.Sync(ctx, b, ptrs([]entries.Entry{e}), nil)
		_, _ = s.Sync(ctx, a, nil, nil)
	}
	var leaked []string
	for _, x := range api.All() {
		if !strings.HasPrefix(x.Id, "trustplane.") {
			leaked = append(leaked, x.Id)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("SPIRE created the hand-over under its own ID %v and one delete of it failed (Unavailable, once); after 3 passes "+
			"of each object, each a few minutes apart, it is still there, tried by no one (createFor uses deleteAll, not "+
			"deleteRenamed): a foreign-looking entry orphan collection never deletes; b stays masked by it (masked %+v, "+
			"registered %v, err %v). Old (9c20d03^ createFor the same); b31577b/cf8e7da's pending set misses this path",
			leaked, out.Masked, out.Registered, err)
	}
}

// TestAnOwnersOwnUndeletableRenamedEntryIsReportedByItsNextPass:
// the docs (takeover paragraph): "an entry so renamed whose delete fails is
// deleted again at the next pass of the object that made it, which reports
// the failure". finish calls deleteRenamed(owner.Tag()) and drops its error
// (`_ =`), relying on execute to report; a pass with an empty plan never
// reaches execute. Here the object's entry is renamed by SPIRE and the
// delete is denied; from its third pass on (the renamed entry is in the
// view as a foreign one, so nothing is created) every pass retries the
// delete, fails, and returns nil: the object reports success and "masked
// by a foreign entry" for an entry the operator made itself, and the
// controller stops retrying with backoff. New in cf8e7da (b31577b joined
// the error into every pass; 9c20d03^ forgot the entry after one failure).
func TestAnOwnersOwnUndeletableRenamedEntryIsReportedByItsNextPass(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	pol := &prefixPolicy{renamesPaths: &renamesPaths{EntryAPI: api, renames: map[string]bool{"/renamed": true}}}
	s := New(pol, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	o := owner("o", 0)
	want := ptrs([]entries.Entry{named("/renamed", "o", "sa", "app", "r")})
	var errs []error
	var out Outcome
	for range 4 {
		var err error
		out, err = s.Sync(ctx, o, want, nil)
		errs = append(errs, err)
	}
	if pol.denied == 0 {
		t.Fatalf("setup: no delete denied")
	}
	before := pol.denied
	_, last := s.Sync(ctx, o, want, nil)
	if last == nil {
		t.Errorf("the object's own entry that SPIRE created under an ID of its own is still in SPIRE (its delete denied again: "+
			"%d more denied deletes in this pass), yet the object's pass returns nil (passes' errors %v; masked %+v): "+
			"the failure is reported only by a pass that creates; finish's deleteRenamed drops the owner's own error. "+
			"New in cf8e7da", pol.denied-before, errs, out.Masked)
	}
}
