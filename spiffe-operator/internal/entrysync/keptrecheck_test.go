package entrysync

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// recheckEnv is a Syncer with a pod cache whose entry for "a/old" stays,
// after a full Sync, only for the pod that still runs as "old".
type recheckEnv struct {
	api            *fake.EntryAPI
	pods           *podSet
	s              *Syncer
	clock          *clock
	notified       *notified
	rechecked      *notified
	o              Owner
	oldE, newE     entries.Entry
	oldID, otherID string
}

func newRecheckEnv(t *testing.T) *recheckEnv {
	t.Helper()
	e := &recheckEnv{api: fake.New(), clock: &clock{now: t0}, notified: &notified{}, rechecked: &notified{},
		pods: &podSet{pods: map[string][]map[string]string{"a/old": {{"app": "web"}}}},
		o:    owner("a", 0), oldE: saEntry("a", "old"), newE: saEntry("a", "new")}
	e.s = New(e.api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute,
		Notify: e.notified.add, Recheck: e.rechecked.add, Pods: e.pods.labels, Now: e.clock.Now})
	ctx := context.Background()
	other := saEntry("b", "other")
	out, err := e.s.Sync(ctx, e.o, ptrs([]entries.Entry{e.oldE, other}), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.oldID, e.otherID = out.Registered[e.oldE.Key()], out.Registered[other.Key()]
	// The service account changes; the old pod still runs as "old".
	if out, err := e.s.Sync(ctx, e.o, ptrs([]entries.Entry{e.newE, saEntry("b", "other")}), nil); err != nil || out.Retained != 1 {
		t.Fatalf("setup: %v, retained %d", err, out.Retained)
	}
	return e
}

// podGone takes the old pod out of the cache and tells the Syncer.
func (e *recheckEnv) podGone() {
	e.pods.mu.Lock()
	e.pods.pods = map[string][]map[string]string{"a/new": {{"app": "web"}}}
	e.pods.mu.Unlock()
	e.s.PodsChanged("a")
}

// TestAnIncrementalPassDropsAKeptEntryOnceItsPodIsGone: a pod deleted in a
// namespace where an owner keeps an entry for its pods asked for a full
// pass of the owner, on the old code: at 50,000 workloads each took over
// 250 ms of the owner's one-at-a-time queue, on every pod deletion of a
// rollout after a withdrawal. Now PodsChanged asks for a recheck, and a
// SyncDelta with no other change judges the kept entries of that namespace
// again: the entry goes once no pod needs it, and nothing else is touched.
func TestAnIncrementalPassDropsAKeptEntryOnceItsPodIsGone(t *testing.T) {
	e := newRecheckEnv(t)
	ctx := context.Background()
	e.podGone()
	if len(e.notified.uids) != 0 || !slices.Equal(e.rechecked.uids, []k8stypes.UID{e.o.UID}) {
		t.Fatalf("asked for a full pass of %v and a recheck of %v; want a recheck of the owner only", e.notified.uids, e.rechecked.uids)
	}
	lists := e.api.CallCount("ListEntries")
	out, err := e.s.SyncDelta(ctx, e.o, nil, nil)
	if err != nil {
		t.Fatalf("SyncDelta: %v", err)
	}
	if e.api.Get(e.oldID) != nil || out.Retained != 0 {
		t.Errorf("the pod that needed %s is gone, yet it stays (retained %d)", e.oldID, out.Retained)
	}
	if e.api.Get(e.otherID) == nil || len(e.api.All()) != 2 {
		t.Errorf("the recheck touched other entries: %v", e.api.All())
	}
	if got := e.api.CallCount("ListEntries"); got != lists {
		t.Errorf("the recheck read SPIRE again (%d lists)", got-lists)
	}
	// Judged once: a later SyncDelta has nothing to do.
	if out, err := e.s.SyncDelta(ctx, e.o, nil, nil); err != nil || out.Talked {
		t.Errorf("a second SyncDelta: %v, talked %v", err, out.Talked)
	}
}

// TestARecheckKeepsAnEntryAPodStillNeeds: a pod change that leaves the pod
// which needed the entry running (another pod went) keeps the entry, and
// a recheck is asked for each pod change again.
func TestARecheckKeepsAnEntryAPodStillNeeds(t *testing.T) {
	e := newRecheckEnv(t)
	ctx := context.Background()
	e.s.PodsChanged("a")
	out, err := e.s.SyncDelta(ctx, e.o, nil, nil)
	if err != nil || e.api.Get(e.oldID) == nil || out.Retained != 1 {
		t.Fatalf("the old pod still runs: %v, retained %d, entry %v", err, out.Retained, e.api.Get(e.oldID))
	}
	e.podGone()
	if len(e.rechecked.uids) != 2 {
		t.Fatalf("rechecks asked: %v, want one per change", e.rechecked.uids)
	}
	if _, err := e.s.SyncDelta(ctx, e.o, nil, nil); err != nil || e.api.Get(e.oldID) != nil {
		t.Errorf("after the pod went: %v, entry %v", err, e.api.Get(e.oldID))
	}
}

// TestARecheckDoesNotDeleteAnEntryWantedAgain: an incremental pass that
// wants the kept entry again (the workload came back) leaves its record of
// retention behind. A recheck must not take that record as a reason to
// delete an entry the owner wants, not even to hand it over to the owner
// again at once (a moment without the entry, for every pod using it).
func TestARecheckDoesNotDeleteAnEntryWantedAgain(t *testing.T) {
	e := newRecheckEnv(t)
	ctx := context.Background()
	if _, err := e.s.SyncDelta(ctx, e.o, ptrs([]entries.Entry{e.oldE}), nil); err != nil {
		t.Fatal(err)
	}
	e.podGone()
	deletes := e.api.CallCount("BatchDeleteEntry")
	if _, err := e.s.SyncDelta(ctx, e.o, nil, nil); err != nil {
		t.Fatal(err)
	}
	if e.api.Get(e.oldID) == nil || e.api.CallCount("BatchDeleteEntry") != deletes {
		t.Errorf("the owner wants %s again, yet the recheck deleted it (%d deletes; it is there again: %v)",
			e.oldID, e.api.CallCount("BatchDeleteEntry")-deletes, e.api.Get(e.oldID) != nil)
	}
}

// TestARecheckWithADueViewNeedsAFullSync: the entries kept are judged
// against the view of their parent; a view older than the resync interval
// makes SyncDelta ask for a full Sync, and the full Sync judges them.
func TestARecheckWithADueViewNeedsAFullSync(t *testing.T) {
	e := newRecheckEnv(t)
	ctx := context.Background()
	e.podGone()
	e.clock.Add(2 * time.Minute)
	if _, err := e.s.SyncDelta(ctx, e.o, nil, nil); !errors.Is(err, ErrNeedFullSync) {
		t.Fatalf("SyncDelta with a due view: %v, want ErrNeedFullSync", err)
	}
	if e.api.Get(e.oldID) == nil {
		t.Fatal("deleted on a due view")
	}
	if _, err := e.s.Sync(ctx, e.o, ptrs([]entries.Entry{e.newE, saEntry("b", "other")}), nil); err != nil || e.api.Get(e.oldID) != nil {
		t.Errorf("the full Sync: %v, entry %v", err, e.api.Get(e.oldID))
	}
}
