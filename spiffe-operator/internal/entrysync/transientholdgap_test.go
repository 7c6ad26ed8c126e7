package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// unixEntry is an entry the pod cache cannot judge (unix selectors, as a
// SpiffeEntry may have).
func unixEntry(path string, sels ...string) entries.Entry {
	e := entries.Entry{SpiffeID: spiffeid.RequireFromString("spiffe://example.org" + path), ParentID: parent}
	for _, v := range sels {
		e.Selectors = append(e.Selectors, entries.Selector{Type: "unix", Value: v})
	}
	e.Normalize()
	return e
}

// makeBeforeBreakCases are workloads whose entry is replaced by one the
// pass cannot tell covers the same pods: selectors the pod cache cannot
// judge (a unix uid and a gid), and a registration without a pod source.
// The workload matches both the old and the new entry.
func makeBeforeBreakCases() []struct {
	name     string
	pods     bool
	old, new entries.Entry
} {
	return []struct {
		name     string
		pods     bool
		old, new entries.Entry
	}{
		{"selectors the pod cache cannot judge", true,
			unixEntry("/old", "uid:1000"), unixEntry("/new", "uid:1000", "gid:1000")},
		{"no pod source", false,
			named("/old", "a", "sa", "app", "web"), named("/new", "a", "sa", "app", "web", "tier", "front")},
	}
}

// TestATransientCreateFailureDoesNotBreakMakeBeforeBreak: a change of
// SPIFFE ID and selectors at once (a SpiffeEntry renamed and narrowed by
// a gid; a registration's template and labels without a pod source). The
// workload matches both the old and the new entry. SPIRE fails the new
// entry's create with Internal (a datastore error): the pass fails and is
// retried, and the old entry must stay meanwhile, as it did when such a
// failure ended the pass.
func TestATransientCreateFailureDoesNotBreakMakeBeforeBreak(t *testing.T) {
	for _, c := range makeBeforeBreakCases() {
		t.Run(c.name, func(t *testing.T) {
			api := fake.New()
			var s *Syncer
			if c.pods {
				s = withPods(api, podW())
			} else {
				s, _, _ = newSyncer(api)
			}
			ctx := context.Background()
			o := owner("a", 0)
			if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{c.old}), nil); err != nil {
				t.Fatal(err)
			}
			api.Fail[c.new.SpiffeID.String()] = codes.Internal
			_, err := s.Sync(ctx, o, ptrs([]entries.Entry{c.new}), nil)
			if err == nil {
				t.Fatal("the failed create reported no error")
			}
			if !holdsPath(api, "/old") {
				t.Errorf("SPIRE failed the replacement's create for a passing cause (%v), yet the old entry was deleted: "+
					"the workload has no entry until a retry succeeds (writes %v)", err, api.Writes())
			}
		})
	}
}

// TestATransientCreateFailureKeepsTheEntryForPodsOfARollingRestart: the
// SPIFFE ID template changes; SPIRE fails the new entry's create with
// Internal on this pass and on the retry. Between the two, the Deployment's
// pods are replaced (a rolling restart, same labels). Nothing SPIRE holds
// but the old entry serves the new pod, and no create was refused: the
// old entry must stay until its replacement lands.
func TestATransientCreateFailureKeepsTheEntryForPodsOfARollingRestart(t *testing.T) {
	api := fake.New()
	pods := podW()
	s := withPods(api, pods)
	ctx := context.Background()
	o := owner("a", 0)
	old := named("/old", "a", "sa", "app", "web")
	repl := named("/repl", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	api.Fail[repl.SpiffeID.String()] = codes.Internal
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{repl}), nil); err == nil || !holdsPath(api, "/old") {
		t.Fatalf("first failed create: %v, entries %v", err, api.All())
	}
	pods.mu.Lock()
	pods.uids["a/sa"] = []string{"w2"}
	pods.mu.Unlock()
	s.PodsChanged("a")
	_, err := s.Sync(ctx, o, ptrs([]entries.Entry{repl}), nil)
	if err == nil {
		t.Fatal("the failed create reported no error")
	}
	if !holdsPath(api, "/old") {
		t.Errorf("pod w2 runs with app=web, its new entry's create failed twice for a passing cause (%v), "+
			"and its old entry was deleted: w2 has no entry at all (writes %v)", err, api.Writes())
	}
}

// TestAPutBackLandingDuringTheReleaseOfItsHolderIsDeleted: the younger
// object holds two entries; the older takes one over and its create fails,
// so the holder's entry is put back. The younger object is deleted while
// the put-back's create is in flight: its release reads the view (without
// the entry being put back) and deletes its other entry. The put-back
// lands while that delete is in flight, before the release dropped the
// claims. The put-back entry must not stay in SPIRE owned by a deleted
// object.
func TestAPutBackLandingDuringTheReleaseOfItsHolderIsDeleted(t *testing.T) {
	api := &slowList{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: podW().labels})
	ctx := context.Background()
	older, younger := owner("older", time.Hour), owner("younger", 0)
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	held := named("/shared", "a", "sa", "app", "web")
	held.Admin = true
	other := named("/other", "a", "sa", "app", "other")
	out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{held, other}), nil)
	if err != nil {
		t.Fatal(err)
	}
	heldID := out.Registered[held.Key()]
	e := named("/shared", "a", "sa", "app", "web") // same key, not admin
	api.FailOnce[e.SpiffeID.String()] = codes.Internal
	inDelete, proceed, released := make(chan struct{}), make(chan struct{}), make(chan struct{})
	api.onCreate = func() {
		// The takeover's create; the next is the put-back's.
		api.mu.Lock()
		api.onCreate = func() {
			api.mu.Lock()
			api.onDelete = func() {
				close(inDelete)
				<-proceed
			}
			api.mu.Unlock()
			go func() {
				defer close(released)
				if err := s.Release(ctx, younger, nil); err != nil {
					t.Errorf("release: %v", err)
				}
			}()
			<-inDelete
		}
		api.mu.Unlock()
	}
	_, _ = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	close(proceed)
	<-released
	if got := api.Get(heldID); got != nil {
		t.Errorf("the younger object was released while its entry %s was being put back, and the entry stayed "+
			"(admin=%v), owned by a deleted object: %v", heldID, got.Admin, api.Writes())
	}
}
