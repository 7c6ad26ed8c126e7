package entrysync

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// hookAPI is the fake SPIRE with a hook run before a Delete naming a given
// ID (once), and Delete failures for given IDs.
type hookAPI struct {
	*fake.EntryAPI
	mu       sync.Mutex
	onDelete map[string]func()
	failDel  map[string]codes.Code
}

func newHookAPI() *hookAPI {
	return &hookAPI{EntryAPI: fake.New(), onDelete: map[string]func(){}, failDel: map[string]codes.Code{}}
}

func (h *hookAPI) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	h.mu.Lock()
	var hooks []func()
	for _, id := range ids {
		if f := h.onDelete[id]; f != nil {
			hooks = append(hooks, f)
			delete(h.onDelete, id)
		}
	}
	h.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	h.mu.Lock()
	var pass []string
	for _, id := range ids {
		if _, bad := h.failDel[id]; !bad {
			pass = append(pass, id)
		}
	}
	h.mu.Unlock()
	res, err := h.EntryAPI.Delete(ctx, pass)
	out := make([]spire.Result, len(ids))
	j := 0
	for i, id := range ids {
		h.mu.Lock()
		c, bad := h.failDel[id]
		h.mu.Unlock()
		if bad {
			out[i] = spire.Result{Code: c, Message: "injected"}
			continue
		}
		out[i] = res[j]
		j++
	}
	return out, err
}

func (l *liveOwners) add(o Owner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tags[o.Tag()] = true
}

// TestACollectionKeepsTheClaimsOfAnOwnerCreatedDuringIt: O holds an entry
// and goes without its Delete pass (the controller Forgets it). The
// startup collection (CollectEverywhere) confirms O gone with AliveNow. N,
// a policy created just after that read, has its first pass while the
// collection's delete is in flight: it wants O's entry and reports it
// masked by the unknown holder. The collection must hand the entry to N:
// it drops only the claims of owners that had them before its read of the
// live owners (before, it dropped N's too, handed nothing over, and the
// pods both policies select had no entry until N's next full pass).
func TestACollectionKeepsTheClaimsOfAnOwnerCreatedDuringIt(t *testing.T) {
	api := newHookAPI()
	ctx := context.Background()
	o, n := owner("old", time.Hour), owner("new", 0)
	live := newLiveOwners(o)
	c := &clock{now: t0}
	note := &notified{}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Now: c.Now,
		Alive: live.read, AliveNow: live.read, Notify: note.add})
	e := entry("/ns/a/sa/x", 0)
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	oID, nID := s.opts.IDs.EntryID(o.Tag(), e.Key()), s.opts.IDs.EntryID(n.Tag(), e.Key())
	live.gone(o)
	s.Forget(o.Kind, o.Name)

	api.onDelete[oID] = func() {
		// N is created after the collection's AliveNow read; its first pass.
		live.add(n)
		out, err := s.Sync(ctx, n, ptrs([]entries.Entry{e}), nil)
		if err != nil || len(out.Masked) != 1 {
			t.Errorf("setup: N's first pass must wait for the unknown holder: %v %+v", err, out)
		}
	}
	if _, err := s.CollectEverywhere(ctx); err != nil {
		t.Fatal(err)
	}
	if api.Get(oID) != nil {
		t.Fatalf("setup: O's entry was not collected")
	}
	_, known, _ := s.claims.known(n.Tag(), e.Key())
	if api.Get(nID) == nil {
		t.Errorf("live owner N wants %s; the collection deleted the gone holder's entry and handed it to nobody "+
			"(N's claims dropped: %v, N notified: %v); SPIRE holds %v", e.SpiffeID, !known, slices.Contains(note.uids, n.UID), api.All())
	}
	if !known {
		t.Errorf("the claims of the live owner N were dropped by orphan collection (its live read predates N)")
	}
}

// TestAHandOverPassesOverAReleasingClaimantWhoseReleaseFails: A holds k; B
// (younger) claims k, masked, and holds k2 of its own; C (youngest) claims
// k, masked. B is deleted; while B's release deletes k2, A is deleted too.
// A's release deletes k and must hand it to C, passing over B, whose
// release is under way (B never held k, and its delete of k2 fails, so its
// claims stay). Before, nothing was created: k, which live C selects, had
// no entry until B's release succeeded.
func TestAHandOverPassesOverAReleasingClaimantWhoseReleaseFails(t *testing.T) {
	api := newHookAPI()
	ctx := context.Background()
	s, _, note := newSyncer(api)
	a, b, cc, k, k2 := threeClaimantsOfOneKey(t, s)
	aID, cID := s.opts.IDs.EntryID(a.Tag(), k.Key()), s.opts.IDs.EntryID(cc.Tag(), k.Key())
	bk2 := s.opts.IDs.EntryID(b.Tag(), k2.Key())
	note.mu.Lock()
	note.uids = nil
	note.mu.Unlock()
	api.failDel[bk2] = codes.Unavailable
	api.onDelete[bk2] = func() {
		if err := s.Release(ctx, a, nil); err != nil {
			t.Errorf("release a: %v", err)
		}
	}
	if err := s.Release(ctx, b, nil); err == nil {
		t.Fatalf("setup: b's release must fail")
	}
	if api.Get(aID) != nil {
		t.Fatalf("setup: a's entry not deleted")
	}
	var holder bool
	for _, x := range api.All() {
		if en, err := entries.FromProto(x); err == nil && en.Key() == k.Key() {
			holder = true
		}
	}
	if !holder {
		t.Errorf("after A's release, key %s (wanted by live C) has no entry in SPIRE: the hand-over skipped releasing B, "+
			"whose release failed; C notified: %v, C's entry %v", k.SpiffeID, slices.Contains(note.uids, cc.UID), api.Get(cID) != nil)
	}
	// While B's release keeps failing, B (older, being deleted) still wins
	// k on paper, and C's passes leave the entry C was handed in place.
	for i := 0; i < 3; i++ {
		if _, err := s.Sync(ctx, cc, ptrs([]entries.Entry{k}), nil); err != nil {
			t.Fatal(err)
		}
		if api.Get(cID) == nil {
			t.Fatalf("C's pass %d took away the entry C was handed; SPIRE holds %v", i, api.All())
		}
	}
	// Once B's release succeeds, C holds k outright.
	delete(api.failDel, bk2)
	delete(api.onDelete, bk2)
	if err := s.Release(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, cc, ptrs([]entries.Entry{k}), nil)
	if err != nil || len(out.Masked) != 0 || api.Get(cID) == nil {
		t.Errorf("C's pass after B's release: %v, masked %+v; SPIRE holds %v", err, out.Masked, api.All())
	}
}

// TestAPartlyFailedReleaseHandsOverWhatItDeleted: A holds k and k2, B
// claims k (masked). A's release deletes k but SPIRE fails the delete of
// k2. The release fails (A keeps its claims until a retry succeeds), but k,
// which it did delete, must be handed to B in the same call. Before, k was
// gone with no holder and B stayed masked by A until a retry succeeded.
func TestAPartlyFailedReleaseHandsOverWhatItDeleted(t *testing.T) {
	api := newHookAPI()
	ctx := context.Background()
	a, b := owner("a-holder", time.Hour), owner("b-young", 0)
	s, _, _ := newSyncer(api)
	k, k2 := entry("/ns/a/sa/x", 0), entry("/ns/b/sa/y", 0)
	if _, err := s.Sync(ctx, a, ptrs([]entries.Entry{k, k2}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, b, ptrs([]entries.Entry{k}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: %v %+v", err, out)
	}
	api.failDel[s.opts.IDs.EntryID(a.Tag(), k2.Key())] = codes.Unavailable
	if err := s.Release(ctx, a, nil); err == nil {
		t.Fatal("setup: release must fail")
	}
	out, err := s.Sync(ctx, b, ptrs([]entries.Entry{k}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if api.Get(s.opts.IDs.EntryID(b.Tag(), k.Key())) == nil {
		t.Errorf("A's partly failed release deleted k and handed it to nobody; B's pass: masked %+v; SPIRE %v", out.Masked, api.All())
	}
}

// TestAHandOverPassesOverAReleasingClaimantThatNeverHeldTheKey: as above,
// but B's release succeeds. A's release must hand k to C; before, neither
// release created it (B never held k) and C's entry waited for C's own
// notified pass.
func TestAHandOverPassesOverAReleasingClaimantThatNeverHeldTheKey(t *testing.T) {
	api := newHookAPI()
	ctx := context.Background()
	s, _, _ := newSyncer(api)
	a, b, cc, k, k2 := threeClaimantsOfOneKey(t, s)
	bk2 := s.opts.IDs.EntryID(b.Tag(), k2.Key())
	api.onDelete[bk2] = func() {
		if err := s.Release(ctx, a, nil); err != nil {
			t.Errorf("release a: %v", err)
		}
	}
	if err := s.Release(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	if api.Get(s.opts.IDs.EntryID(cc.Tag(), k.Key())) == nil {
		t.Errorf("after A's and B's releases returned, live C's entry for %s was not created (hand-over gap beyond one round trip): %v",
			k.SpiffeID, api.All())
	}
}

// threeClaimantsOfOneKey has three owners of s claim key k: a (oldest)
// holds it, b and c are masked; b also holds k2 of its own.
func threeClaimantsOfOneKey(t *testing.T, s *Syncer) (a, b, c Owner, k, k2 entries.Entry) {
	t.Helper()
	a, b, c = owner("a-holder", 2*time.Hour), owner("b-middle", time.Hour), owner("c-young", 0)
	k, k2 = entry("/ns/a/sa/x", 0), entry("/ns/b/sa/y", 0)
	for _, st := range []struct {
		o      Owner
		want   []entries.Entry
		masked int
	}{{a, []entries.Entry{k}, 0}, {b, []entries.Entry{k, k2}, 1}, {c, []entries.Entry{k}, 1}} {
		if out, err := s.Sync(context.Background(), st.o, ptrs(st.want), nil); err != nil || len(out.Masked) != st.masked {
			t.Fatalf("setup %s: %v %+v", st.o.Name, err, out)
		}
	}
	return a, b, c, k, k2
}
