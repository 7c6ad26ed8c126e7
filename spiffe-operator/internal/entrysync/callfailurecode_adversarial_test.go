package entrysync

import (
	"context"
	"testing"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// createCallFails is a SPIRE whose BatchCreateEntry fails as a whole call
// with code (while code is not OK), answered as spire.Client answers a
// failed call: every item gets the call's code, and the error says why.
// Its other calls (updates, deletes, lists) are answered: an authorization
// policy (SPIRE's OPA policy engine sees the request, or a proxy's RBAC)
// that denies BatchCreateEntry, an authenticating proxy whose token for
// one route expired, and the like.
type createCallFails struct {
	*fake.EntryAPI
	code codes.Code
}

func (f *createCallFails) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	if f.code == codes.OK {
		return f.EntryAPI.Create(ctx, in)
	}
	err := status.Errorf(f.code, "BatchCreateEntry: call failed as a whole (fake)")
	out := make([]spire.Result, len(in))
	for i := range out {
		out[i] = spire.Result{Code: f.code, Message: err.Error()}
	}
	return out, err
}

// wholeCallCodes are codes a call can fail with as a whole that
// isTransient does not count as passing. None of them says anything of the
// entries in the call: the call never reached SPIRE's entry validation.
var wholeCallCodes = []codes.Code{codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition, codes.InvalidArgument, codes.Unimplemented}

// TestAWholeCreateCallFailingWithANonTransientCodeKeepsMakeBeforeBreak: the
// same change as TestATransientCreateFailureDoesNotBreakMakeBeforeBreak (a
// new SPIFFE ID and narrower selectors, the workload matching both), but
// SPIRE fails the BatchCreateEntry call as a whole, with a code that is not
// one isTransient lists. The docs say such a call "is taken the same way"
// as a create failed for a cause that may pass. Since 9c20d03 the pass
// goes on after the failed call, and its entries, given the call's code,
// fall into execute's default case: they are recorded as refused (as if
// SPIRE had judged the entries), withoutReplaced (not withoutAccountsOf)
// judges the stale entries, and the old entry is deleted although its
// replacement was never even looked at by SPIRE. Before 9c20d03 the pass
// ended at the failed call, before any delete.
func TestAWholeCreateCallFailingWithANonTransientCodeKeepsMakeBeforeBreak(t *testing.T) {
	for _, c := range makeBeforeBreakCases() {
		for _, code := range wholeCallCodes {
			t.Run(c.name+"/"+code.String(), func(t *testing.T) {
				api := &createCallFails{EntryAPI: fake.New()}
				var s *Syncer
				if c.pods {
					s = withPods(api.EntryAPI, podW())
					s.api = api
				} else {
					s, _, _ = newSyncer(api)
				}
				ctx := context.Background()
				o := owner("a", 0)
				if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{c.old}), nil); err != nil {
					t.Fatal(err)
				}
				api.code = code
				_, err := s.Sync(ctx, o, ptrs([]entries.Entry{c.new}), nil)
				if err == nil {
					t.Fatal("the failed create call reported no error")
				}
				if !holdsPath(api.EntryAPI, "/old") {
					t.Errorf("SPIRE failed the BatchCreateEntry call as a whole with %s (%v): the replacement was never judged, "+
						"yet the old entry was deleted in the same pass, so the workload has no entry at all until the "+
						"call succeeds (writes %v)", code, err, api.Writes())
				}
				// Once SPIRE takes creates again, the replacement lands.
				api.code = codes.OK
				if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{c.new}), nil); err != nil {
					t.Fatalf("the pass after SPIRE takes creates again: %v", err)
				}
				if !holdsPath(api.EntryAPI, "/new") || holdsPath(api.EntryAPI, "/old") {
					t.Errorf("after recovery: entries %v", api.Writes())
				}
			})
		}
	}
}

// TestAWholeCreateCallFailingWithANonTransientCodeKeepsTheEntryForPodsOfARollingRestart:
// as TestATransientCreateFailureKeepsTheEntryForPodsOfARollingRestart, with
// the pod source set: the SPIFFE ID template changes, the replacement's
// create fails (transiently first, which records pod w as needing the old
// entry), the Deployment's pods are replaced (w2, same labels), and the
// next pass's BatchCreateEntry call fails as a whole with a code
// isTransient does not list. Nothing SPIRE holds but the old entry serves
// w2. withoutReplaced counts only pods recorded earlier, so the old entry
// is deleted and w2 has no identity. Before 9c20d03 the pass ended at the
// failed call.
func TestAWholeCreateCallFailingWithANonTransientCodeKeepsTheEntryForPodsOfARollingRestart(t *testing.T) {
	for _, code := range wholeCallCodes {
		t.Run(code.String(), func(t *testing.T) {
			api := &createCallFails{EntryAPI: fake.New()}
			pods := podW()
			s := withPods(api.EntryAPI, pods)
			s.api = api
			ctx := context.Background()
			o := owner("a", 0)
			old := named("/old", "a", "sa", "app", "web")
			repl := named("/repl", "a", "sa", "app", "web")
			if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
				t.Fatal(err)
			}
			api.code = codes.Unavailable
			if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{repl}), nil); err == nil || !holdsPath(api.EntryAPI, "/old") {
				t.Fatalf("first failed create call: %v, writes %v", err, api.Writes())
			}
			pods.mu.Lock()
			pods.uids["a/sa"] = []string{"w2"}
			pods.mu.Unlock()
			s.PodsChanged("a")
			api.code = code
			_, err := s.Sync(ctx, o, ptrs([]entries.Entry{repl}), nil)
			if err == nil {
				t.Fatal("the failed create call reported no error")
			}
			if !holdsPath(api.EntryAPI, "/old") {
				t.Errorf("pod w2 runs with app=web; SPIRE failed the BatchCreateEntry call of its new entry as a whole with %s (%v), "+
					"and its old entry was deleted in the same pass: w2 has no entry at all (writes %v)", code, err, api.Writes())
			}
		})
	}
}
