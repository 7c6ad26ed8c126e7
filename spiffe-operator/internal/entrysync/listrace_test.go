package entrysync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// slowList is SPIRE whose listing of a parent is slow (paging through many
// entries): a write of another pass can land between the moment the list
// reflects and the moment it is answered. onCreate runs before a create.
type slowList struct {
	*fake.EntryAPI
	mu       sync.Mutex
	onCreate func()
	onDelete func()
	// snapshot, when set, is told once the next list has read SPIRE, and
	// the list is answered once release is closed.
	snapshot chan struct{}
	release  chan struct{}
}

func (s *slowList) ListByParent(ctx context.Context, parent spiffeid.ID) ([]*types.Entry, error) {
	list, err := s.EntryAPI.ListByParent(ctx, parent)
	s.mu.Lock()
	snap, rel := s.snapshot, s.release
	s.snapshot = nil
	s.mu.Unlock()
	if snap != nil {
		close(snap)
		<-rel
	}
	return list, err
}

func (s *slowList) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	s.mu.Lock()
	f := s.onCreate
	s.onCreate = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.EntryAPI.Create(ctx, in)
}

func (s *slowList) Delete(ctx context.Context, ids []string) ([]spire.Result, error) {
	s.mu.Lock()
	f := s.onDelete
	s.onDelete = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.EntryAPI.Delete(ctx, ids)
}

// listRace is a syncer whose SPIRE answers a list late, and two owners
// under one parent: b's passes re-read it while a's write.
type listRace struct {
	api    *slowList
	c      *clock
	s      *Syncer
	a, b   Owner
	bWants []*entries.Entry
}

func newListRace() *listRace {
	api := &slowList{EntryAPI: fake.New()}
	c := &clock{now: t0}
	return &listRace{api: api, c: c,
		s: New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Now: c.Now}),
		a: owner("a", 0), b: owner("b", 0), bWants: ptrs([]entries.Entry{entry("/ns/b/sa/y", 0)})}
}

// bReadsDuring lets the view come due and starts b's pass, whose list
// reads SPIRE now and is answered once done reports true.
func (r *listRace) bReadsDuring(ctx context.Context, t *testing.T, done func() bool) *sync.WaitGroup {
	r.c.Add(2 * time.Second)
	return overlapList(t, r.api, func() {
		if _, err := r.s.Sync(ctx, r.b, r.bWants, nil); err != nil {
			t.Error(err)
		}
	}, done)
}

// overlapList arms the next list to read SPIRE now, starts pass (another
// worker's) that makes it, and answers it once done reports true. A pass
// that does not list within 10 seconds (it trusted a view that was due)
// fails the test rather than hanging it.
func overlapList(t *testing.T, api *slowList, pass func(), done func() bool) *sync.WaitGroup {
	snap, rel := make(chan struct{}), make(chan struct{})
	api.mu.Lock()
	api.snapshot, api.release = snap, rel
	api.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pass() }()
	select {
	case <-snap:
	case <-time.After(10 * time.Second):
		api.mu.Lock()
		listed := api.snapshot == nil
		api.snapshot, api.release = nil, nil
		api.mu.Unlock()
		if !listed {
			t.Error("the other pass did not read SPIRE, though its view of the parent was due")
			return &wg
		}
		<-snap
	}
	go func() {
		// Polled, as the write's record in the view has no hook; bounded,
		// so that a pass that never records it fails the test, not hangs it.
		for deadline := time.Now().Add(10 * time.Second); !done() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		close(rel)
	}()
	return &wg
}

// TestAListOverlappingADeleteDoesNotResurrectTheEntry: the converse. Owner
// a deletes its entry (its pod went) while b's list, which read SPIRE
// before the delete, is in flight; the list's answer puts the deleted
// entry back into the view. When a pod of a's lands on the node again,
// a's pass finds "its" entry in the view and creates nothing: the pod has
// no entry until the view is read again, at the resync (30 minutes by
// default), though its policy reports the entry registered.
func TestAListOverlappingADeleteDoesNotResurrectTheEntry(t *testing.T) {
	r := newListRace()
	api, c, s, a, b, bWants := r.api, r.c, r.s, r.a, r.b, r.bWants
	ctx := context.Background()
	aWants := ptrs([]entries.Entry{entry("/ns/a/sa/x", 0)})
	if _, err := s.Sync(ctx, b, bWants, nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, a, aWants, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Add(59 * time.Second)
	var wg *sync.WaitGroup
	api.onDelete = func() { wg = r.bReadsDuring(ctx, t, func() bool { return s.entriesOf(a) == 0 }) }
	// a's pod goes.
	if out, err = s.Sync(ctx, a, nil, ParseParents(out.Parents)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := countOf(api.EntryAPI, a); n != 0 {
		t.Fatalf("a's entry was not deleted: %d", n)
	}
	// A pod of a's lands on the node again, within the view's freshness.
	c.Add(10 * time.Second)
	out, err = s.Sync(ctx, a, aWants, ParseParents(out.Parents))
	if err != nil {
		t.Fatal(err)
	}
	if n := countOf(api.EntryAPI, a); n != 1 {
		t.Errorf("a's pass reports %d entries registered, yet SPIRE holds %d of a's: the pod has no entry", len(out.Registered), n)
	}
}

// TestAListOverlappingACreateDoesNotLoseTheEntry: two owners share a
// parent (per-node parents: every policy with pods on a node). Owner b's
// pass re-reads the parent (its view came due) while owner a's pass
// creates an entry there; the list reflects SPIRE from before the create
// and is answered after it, and replaces the view a's create was recorded
// in. The view then holds nothing of a's under the parent: a's next pass,
// which no longer wants the entry, neither deletes it nor records the
// parent, and from then on no pass of a reads that parent again, nor does
// releasing a. The entry stays in SPIRE for as long as a lives, and after.
func TestAListOverlappingACreateDoesNotLoseTheEntry(t *testing.T) {
	r := newListRace()
	api, c, s, a, b, bWants := r.api, r.c, r.s, r.a, r.b, r.bWants
	ctx := context.Background()
	if _, err := s.Sync(ctx, b, bWants, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(ctx, a, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Just before the view of the parent comes due, a pod of a's lands on
	// the node: a's pass finds the view fresh and creates.
	c.Add(59 * time.Second)
	var bDone *sync.WaitGroup
	api.onCreate = func() {
		// The view comes due; b's pass (another worker) re-reads it. Its
		// list reads SPIRE before a's create lands and is answered after
		// a's pass recorded the create.
		bDone = r.bReadsDuring(ctx, t, func() bool { return s.entriesOf(a) > 0 })
	}
	out, err := s.Sync(ctx, a, ptrs([]entries.Entry{entry("/ns/a/sa/x", 0)}), nil)
	if err != nil || len(out.Registered) != 1 {
		t.Fatalf("a's create: %v, %+v", err, out)
	}
	bDone.Wait()
	recorded := out.Parents
	t.Logf("a's status.parentIDs after the create: %v", recorded)

	// The pod goes: a wants nothing.
	for range 2 {
		out, err = s.Sync(ctx, a, nil, ParseParents(recorded))
		if err != nil {
			t.Fatal(err)
		}
		recorded = out.Parents
		c.Add(2 * time.Minute)
	}
	if n := countOf(api.EntryAPI, a); n != 0 {
		t.Errorf("a wants nothing, yet SPIRE holds %d entries of a's (status.parentIDs %v)", n, recorded)
	}
	if err := s.Release(ctx, a, ParseParents(recorded)); err != nil {
		t.Fatal(err)
	}
	if n := countOf(api.EntryAPI, a); n != 0 {
		t.Errorf("a is released, yet SPIRE holds %d entries of a's", n)
	}
}

// entriesOf counts a's entries in the views.
func (s *Syncer) entriesOf(o Owner) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.views {
		n += v.held[o.Tag()]
	}
	return n
}

func countOf(api *fake.EntryAPI, o Owner) int {
	ids := entries.IDScheme{Prefix: "trustplane."}
	n := 0
	for _, e := range api.All() {
		if tag, ok := ids.Owner(e.Id); ok && tag == o.Tag() {
			n++
		}
	}
	return n
}
