package entrysync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/labels"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

var (
	parent = spiffeid.RequireFromString("spiffe://example.org/agent")
	t0     = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func entry(path string, ttl int32) entries.Entry {
	e := entries.Entry{
		SpiffeID:    spiffeid.RequireFromString("spiffe://example.org" + path),
		ParentID:    parent,
		Selectors:   []entries.Selector{{Type: "k8s", Value: "ns:" + strings.Split(path, "/")[2]}},
		X509SVIDTTL: ttl,
	}
	e.Normalize()
	return e
}

func ptrs(es []entries.Entry) []*entries.Entry {
	out := make([]*entries.Entry, len(es))
	for i := range es {
		out[i] = &es[i]
	}
	return out
}

func owner(name string, age time.Duration) Owner {
	return Owner{Kind: "SpiffeRegistration", Name: name, UID: k8stypes.UID(name + "-0000-0000-0000-000000000000"), Created: t0.Add(-age)}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type notified struct {
	mu   sync.Mutex
	uids []k8stypes.UID
}

func (n *notified) add(o Owner) { n.mu.Lock(); n.uids = append(n.uids, o.UID); n.mu.Unlock() }

// has reports whether o was notified.
func (n *notified) has(o Owner) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.uids, o.UID)
}

func newSyncer(api spire.EntryAPI) (*Syncer, *clock, *notified) {
	c := &clock{now: t0}
	n := &notified{}
	return New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Notify: n.add, Now: c.Now}), c, n
}

func TestCreatesOnceThenMakesNoCallsWhenIdle(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	want := []entries.Entry{entry("/ns/a/sa/x", 3600), entry("/ns/b/sa/y", 3600)}
	out, err := s.Sync(ctx, o, ptrs(want), nil)
	if err != nil || len(out.Registered) != 2 {
		t.Fatalf("first pass: %v, registered %d", err, len(out.Registered))
	}
	calls := api.CallCount("ListEntries") + api.CallCount("BatchCreateEntry")
	out, err = s.Sync(ctx, o, ptrs(want), nil)
	if err != nil || len(out.Registered) != 2 || out.Talked {
		t.Fatalf("second pass: %v, registered %d, talked %v", err, len(out.Registered), out.Talked)
	}
	if got := api.CallCount("ListEntries") + api.CallCount("BatchCreateEntry"); got != calls {
		t.Errorf("idle pass made %d SPIRE calls", got-calls)
	}
	for _, e := range api.All() {
		if !strings.HasPrefix(e.Id, "trustplane."+o.Tag()+".") {
			t.Errorf("entry ID %q does not carry the ownership marker", e.Id)
		}
	}
}

func TestTTLChangeIsUpdatedInPlace(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	out, _ := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/x", 3600)}), nil)
	var id string
	for _, v := range out.Registered {
		id = v
	}
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/x", 60)}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := api.Get(id); got == nil || got.X509SvidTtl != 60 {
		t.Fatalf("entry %s after TTL change: %v", id, got)
	}
	if len(api.All()) != 1 || api.CallCount("BatchUpdateEntry") != 1 {
		t.Errorf("want one entry updated in place, got %d entries, %d updates", len(api.All()), api.CallCount("BatchUpdateEntry"))
	}
}

func TestSpiffeIDChangeCreatesBeforeDeleting(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/old", 0)}), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/new", 0)}), nil); err != nil {
		t.Fatal(err)
	}
	log := api.Writes()
	if len(log) != 3 || !strings.HasPrefix(log[1], "create") || !strings.HasPrefix(log[2], "delete") {
		t.Errorf("write order = %v, want create, create, delete", log)
	}
	if all := api.All(); len(all) != 1 || all[0].SpiffeId.Path != "/ns/a/sa/new" {
		t.Errorf("entries = %v", all)
	}
}

func TestForeignEntryIsNeverTouchedAndMasks(t *testing.T) {
	api := fake.New()
	e := entry("/ns/a/sa/x", 3600)
	foreign := e.Proto("")
	foreign.X509SvidTtl = 5
	fid := api.Put(foreign)
	other := entry("/ns/z/sa/manual", 0)
	oid := api.Put(other.Proto("hand-made"))
	s, _, _ := newSyncer(api)
	out, err := s.Sync(context.Background(), owner("a", 0), ptrs([]entries.Entry{e}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Masked) != 1 || !strings.Contains(out.Masked[0].By, fid) {
		t.Errorf("masked = %+v", out.Masked)
	}
	if got := api.Get(fid); got.X509SvidTtl != 5 {
		t.Error("foreign entry was updated")
	}
	if api.Get(oid) == nil {
		t.Error("unrelated foreign entry was deleted")
	}
}

func TestOldestOwnerWinsAndHandsOver(t *testing.T) {
	api := fake.New()
	s, _, n := newSyncer(api)
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := entry("/ns/a/sa/x", 0)
	if _, err := s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, old, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Registered) != 1 {
		t.Fatalf("older owner: %v, %+v", err, out)
	}
	if all := api.All(); len(all) != 1 || !strings.Contains(all[0].Id, old.Tag()) {
		t.Fatalf("older owner did not take over: %v", all)
	}
	out, _ = s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if len(out.Masked) != 1 || out.Masked[0].By != old.String() {
		t.Fatalf("younger owner not masked: %+v", out)
	}
	n.uids = nil
	if err := s.Release(ctx, old, []spiffeid.ID{parent}); err != nil {
		t.Fatal(err)
	}
	if len(n.uids) != 1 || n.uids[0] != young.UID {
		t.Fatalf("notified %v, want the younger owner", n.uids)
	}
	out, _ = s.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if all := api.All(); len(out.Registered) != 1 || len(all) != 1 || !strings.Contains(all[0].Id, young.Tag()) {
		t.Errorf("younger owner did not take over: %v", all)
	}
}

func TestSpireUnavailableLosesNothing(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/x", 0)}), nil); err != nil {
		t.Fatal(err)
	}
	api.SetUnavailable(true)
	want := []entries.Entry{entry("/ns/a/sa/x", 0), entry("/ns/b/sa/y", 0)}
	if _, err := s.Sync(ctx, o, ptrs(want), nil); err == nil {
		t.Fatal("no error while SPIRE is down")
	}
	api.SetUnavailable(false)
	out, err := s.Sync(ctx, o, ptrs(want), nil)
	if err != nil || len(out.Registered) != 2 || len(api.All()) != 2 {
		t.Fatalf("after recovery: %v, %+v, %d entries", err, out, len(api.All()))
	}
}

func TestRejectedEntryIsANamedFailureAndTheRestRegister(t *testing.T) {
	api := fake.New()
	api.Reject["spiffe://example.org/ns/bad/sa/x"] = true
	s, _, _ := newSyncer(api)
	out, err := s.Sync(context.Background(), owner("a", 0), ptrs([]entries.Entry{entry("/ns/bad/sa/x", 0), entry("/ns/ok/sa/y", 0)}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Failed) != 1 || out.Failed[0].Reason != "InvalidArgument" || len(out.Registered) != 1 {
		t.Errorf("outcome = %+v", out)
	}
}

func TestResyncRepairsManualDeletionAndEdit(t *testing.T) {
	api := fake.New()
	s, c, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	want := []entries.Entry{entry("/ns/a/sa/x", 60), entry("/ns/b/sa/y", 60)}
	out, _ := s.Sync(ctx, o, ptrs(want), nil)
	ids := map[string]bool{}
	for _, id := range out.Registered {
		ids[id] = true
	}
	var edited, removed string
	for id := range ids {
		if edited == "" {
			edited = id
		} else {
			removed = id
		}
	}
	api.Remove(removed)
	x := api.Get(edited)
	x.X509SvidTtl = 1
	api.Put(x)
	c.Add(2 * time.Minute)
	if _, err := s.Sync(ctx, o, ptrs(want), nil); err != nil {
		t.Fatal(err)
	}
	if api.Get(removed) == nil || api.Get(edited).X509SvidTtl != 60 {
		t.Errorf("not repaired: removed=%v edited=%v", api.Get(removed), api.Get(edited))
	}
}

func TestEntriesOfVanishedOwnersAreCollected(t *testing.T) {
	api := fake.New()
	e := entry("/ns/a/sa/x", 0)
	ids := entries.IDScheme{Prefix: "trustplane."}
	dead := owner("dead", 0)
	api.Put(e.Proto(ids.EntryID(dead.Tag(), e.Key())))
	s := New(api, Options{IDs: ids, ResyncInterval: time.Minute, Alive: func(context.Context) (map[string]bool, error) {
		return map[string]bool{}, nil
	}})
	if _, err := s.Sync(context.Background(), owner("live", 0), nil, nil); err != nil {
		t.Fatal(err)
	}
	// Nothing under the parent was listed (no wanted entries): list it via Release.
	if err := s.Release(context.Background(), owner("live", 0), []spiffeid.ID{parent}); err != nil {
		t.Fatal(err)
	}
	if len(api.All()) != 0 {
		t.Errorf("entry of a vanished owner survived: %v", api.All())
	}
}

func TestErrStaleWhenEntryVanishesBeforeUpdate(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	out, _ := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/x", 60)}), nil)
	for _, id := range out.Registered {
		api.Remove(id)
	}
	_, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/x", 30)}), nil)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("err = %v, want ErrStale", err)
	}
	out, err = s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/sa/x", 30)}), nil)
	if err != nil || len(out.Registered) != 1 || len(api.All()) != 1 {
		t.Errorf("not recreated: %v %+v", err, out)
	}
}

func TestRestartNeverChurnsASharedEntry(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := entry("/ns/a/sa/x", 0)
	before, _, _ := newSyncer(api)
	for _, o := range []Owner{old, young} {
		if _, err := before.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
			t.Fatal(err)
		}
	}
	held := api.All()
	if len(held) != 1 || !strings.Contains(held[0].Id, old.Tag()) {
		t.Fatalf("before the restart: %v", held)
	}
	writes := len(api.Writes())

	// A fresh process: the younger owner happens to pass first.
	after, _, n := newSyncer(api)
	out, err := after.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 1 || out.Masked[0].Foreign || len(out.Registered) != 0 {
		t.Fatalf("younger owner's first pass: %v, %+v", err, out)
	}
	out, err = after.Sync(ctx, old, ptrs([]entries.Entry{e}), nil)
	if err != nil || out.Registered[e.Key()] != held[0].Id {
		t.Fatalf("older owner's first pass: %v, %+v", err, out)
	}
	if len(n.uids) != 1 || n.uids[0] != young.UID {
		t.Errorf("notified %v, want the younger owner", n.uids)
	}
	out, err = after.Sync(ctx, young, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 1 || out.Masked[0].By != old.String() {
		t.Fatalf("younger owner's second pass: %v, %+v", err, out)
	}
	if w := api.Writes(); len(w) != writes {
		t.Errorf("the restart wrote to SPIRE: %v", w[writes:])
	}
}

func TestAKnownYoungerHolderIsTakenOverOnceItsOwnerIsSeen(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := entry("/ns/a/sa/x", 0)
	before, _, _ := newSyncer(api)
	if _, err := before.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	// After a restart the older owner passes first: the holder is unknown.
	after, _, n := newSyncer(api)
	if out, err := after.Sync(ctx, old, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("older owner: %v, %+v", err, out)
	}
	// The younger holder's pass finds the older winner and tells it.
	if out, err := after.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("younger owner: %v, %+v", err, out)
	}
	if len(n.uids) == 0 || n.uids[len(n.uids)-1] != old.UID {
		t.Fatalf("notified %v, want the older owner", n.uids)
	}
	out, err := after.Sync(ctx, old, ptrs([]entries.Entry{e}), nil)
	if all := api.All(); err != nil || len(out.Registered) != 1 || len(all) != 1 || !strings.Contains(all[0].Id, old.Tag()) {
		t.Fatalf("older owner did not take over: %v, %+v, %v", err, out, all)
	}
}

// podSet is a fake pod cache: labels of pods by "namespace/serviceAccount".
// A pod's UID is uids[key][i] when set, else "<key>/<i>".
type podSet struct {
	mu   sync.Mutex
	pods map[string][]map[string]string
	uids map[string][]string
	// nodes are the pods' nodes, as uids are their UIDs; none: unscheduled.
	nodes map[string][]string
}

func (p *podSet) labels(_ context.Context, ns, sa string) ([]Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := ns + "/" + sa
	out := make([]Pod, 0, len(p.pods[key]))
	for i, l := range p.pods[key] {
		uid := fmt.Sprintf("%s/%d", key, i)
		if i < len(p.uids[key]) {
			uid = p.uids[key][i]
		}
		node := ""
		if i < len(p.nodes[key]) {
			node = p.nodes[key][i]
		}
		out = append(out, Pod{UID: uid, Labels: labels.Set(l), Node: node})
	}
	return out, nil
}

func saEntry(ns, sa string, podLabels ...string) entries.Entry {
	e := entries.Entry{
		SpiffeID:  spiffeid.RequireFromString("spiffe://example.org/ns/" + ns + "/sa/" + sa),
		ParentID:  parent,
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:" + ns}, {Type: "k8s", Value: "sa:" + sa}},
	}
	for i := 0; i+1 < len(podLabels); i += 2 {
		e.Selectors = append(e.Selectors, entries.Selector{Type: "k8s", Value: "pod-label:" + podLabels[i] + ":" + podLabels[i+1]})
	}
	e.Normalize()
	return e
}

func TestAnEntryNoLongerWantedStaysWhileAPodStillNeedsIt(t *testing.T) {
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{"a/old": {{"app": "web"}}}}
	n := &notified{}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Notify: n.add, Pods: pods.labels})
	ctx := context.Background()
	o := owner("a", 0)
	oldE, newE := saEntry("a", "old"), saEntry("a", "new")
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{oldE}), nil); err != nil {
		t.Fatal(err)
	}
	// The service account changes; the old pod still runs as "old".
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{newE}), nil)
	if err != nil || out.Retained != 1 || len(api.All()) != 2 {
		t.Fatalf("after the change: %v, retained %d, %d entries", err, out.Retained, len(api.All()))
	}
	// The same holds for an incremental pass.
	if _, err := s.SyncDelta(ctx, o, nil, ptrs([]entries.Entry{oldE})); err != nil || len(api.All()) != 2 {
		t.Fatalf("incremental pass: %v, %d entries", err, len(api.All()))
	}
	s.PodsChanged("b")
	if len(n.uids) != 0 {
		t.Errorf("a pod change in another namespace notified %v", n.uids)
	}
	pods.mu.Lock()
	pods.pods = map[string][]map[string]string{"a/new": {{"app": "web"}}}
	pods.mu.Unlock()
	s.PodsChanged("a")
	if len(n.uids) != 1 || n.uids[0] != o.UID {
		t.Fatalf("notified %v, want the owner", n.uids)
	}
	out, err = s.Sync(ctx, o, ptrs([]entries.Entry{newE}), nil)
	if all := api.All(); err != nil || out.Retained != 0 || len(all) != 1 || all[0].SpiffeId.Path != "/ns/a/sa/new" {
		t.Fatalf("after the pod went: %v, %+v, %v", err, out, all)
	}
	// Deleting the owner deletes everything, pods or not.
	pods.pods["a/new"] = []map[string]string{{"app": "web"}}
	if err := s.Release(ctx, o, nil); err != nil || len(api.All()) != 0 {
		t.Fatalf("release: %v, %v", err, api.All())
	}
}

func TestRetentionChecksPodLabelsAndCoverage(t *testing.T) {
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{"a/sa": {{"app": "canary", "track": "canary"}}}}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Pods: pods.labels})
	ctx := context.Background()
	o := owner("a", 0)
	web := saEntry("a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web}), nil); err != nil {
		t.Fatal(err)
	}
	// No pod carries app=web: the entry goes at once.
	out, err := s.Sync(ctx, o, nil, nil)
	if err != nil || out.Retained != 0 || len(api.All()) != 0 {
		t.Fatalf("%v, retained %d, %v", err, out.Retained, api.All())
	}
	// A pod that a wanted entry also selects does not keep the old one: a
	// change of SPIFFE ID alone is make-before-break as before.
	pods.pods["a/x"] = []map[string]string{{"app": "x"}}
	one := saEntry("a", "x")
	two := one
	two.SpiffeID = spiffeid.RequireFromString("spiffe://example.org/renamed")
	two.Normalize()
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{one}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, o, ptrs([]entries.Entry{two}), nil); err != nil || out.Retained != 0 || len(api.All()) != 1 {
		t.Fatalf("%v, retained %d, %v", err, out.Retained, api.All())
	}
	// Without the pod, nothing keeps it.
	delete(pods.pods, "a/x")
	if out, err := s.Sync(ctx, o, nil, nil); err != nil || out.Retained != 0 || len(api.All()) != 0 {
		t.Fatalf("%v, retained %d, %v", err, out.Retained, api.All())
	}
	// An entry with a selector the pod cache cannot judge is never kept.
	odd := entry("/ns/a/sa/x", 0)
	odd.Selectors = append(odd.Selectors, entries.Selector{Type: "unix", Value: "uid:0"})
	odd.Normalize()
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{odd}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, o, nil, nil); err != nil || out.Retained != 0 || len(api.All()) != 0 {
		t.Fatalf("%v, retained %d, %v", err, out.Retained, api.All())
	}
}

func TestATransientPerEntryErrorIsRetriedNotReportedAsRefused(t *testing.T) {
	api := fake.New()
	api.Fail["spiffe://example.org/ns/a/sa/x"] = codes.Internal
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	want := ptrs([]entries.Entry{entry("/ns/a/sa/x", 0), entry("/ns/b/sa/y", 0)})
	out, err := s.Sync(ctx, owner("a", 0), want, nil)
	if !errors.Is(err, ErrTransient) || len(out.Failed) != 0 {
		t.Fatalf("err = %v, failed = %+v; want ErrTransient and no refusal", err, out.Failed)
	}
	delete(api.Fail, "spiffe://example.org/ns/a/sa/x")
	out, err = s.Sync(ctx, owner("a", 0), want, nil)
	if err != nil || len(out.Registered) != 2 || len(api.All()) != 2 {
		t.Fatalf("retry: %v, %+v, %d entries", err, out, len(api.All()))
	}
}

func TestAnEntryIDSpireDidNotKeepIsANamedFailureAndLeavesNoEntry(t *testing.T) {
	api := fake.New()
	api.IgnoreIDs = true
	s, _, _ := newSyncer(api)
	out, err := s.Sync(context.Background(), owner("a", 0), ptrs([]entries.Entry{entry("/ns/a/sa/x", 0)}), nil)
	if err != nil || len(out.Failed) != 1 || out.Failed[0].Reason != ReasonEntryIDNotKept {
		t.Fatalf("%v, %+v", err, out)
	}
	if all := api.All(); len(all) != 0 {
		t.Errorf("left %v behind", all)
	}
}

func TestAnEntryMaskedByAForeignEntryIsCreatedSoonAfterItGoes(t *testing.T) {
	api := fake.New()
	e := entry("/ns/a/sa/x", 0)
	fid := api.Put(e.Proto(""))
	told := make(chan Owner, 1)
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour,
		Notify: func(o Owner) { told <- o }, MaskRecheck: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := owner("a", 0)
	if out, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Masked) != 1 || !out.Masked[0].Foreign {
		t.Fatalf("%v, %+v", err, out)
	}
	api.Remove(fid)
	select {
	case got := <-told:
		if got.UID != o.UID {
			t.Fatalf("told %v, want the masked owner", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the owner was not told that the foreign entry went")
	}
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Registered) != 1 || len(api.All()) != 1 {
		t.Fatalf("after the foreign entry went: %v, %+v, %v", err, out, api.All())
	}
}

func TestCollectEverywhereDeletesOnlyItsOwnOrphans(t *testing.T) {
	api := fake.New()
	e := entry("/ns/a/sa/x", 0)
	f := entry("/ns/b/sa/y", 0)
	mine := entries.IDScheme{Prefix: "team."}
	nested := entries.IDScheme{Prefix: "team.prod."}
	dead, live := owner("dead", 0), owner("live", 0)
	orphan := api.Put(e.Proto(mine.EntryID(dead.Tag(), e.Key())))
	kept := api.Put(f.Proto(mine.EntryID(live.Tag(), f.Key())))
	other := api.Put(e.Proto(nested.EntryID(dead.Tag(), e.Key())))
	hand := api.Put(f.Proto("team.hand-made"))
	s := New(api, Options{IDs: mine, ResyncInterval: time.Minute, Alive: func(context.Context) (map[string]bool, error) {
		return map[string]bool{live.Tag(): true}, nil
	}})
	n, err := s.CollectEverywhere(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("collected %d: %v", n, err)
	}
	if api.Get(orphan) != nil {
		t.Error("the orphan survived")
	}
	for _, id := range []string{kept, other, hand} {
		if api.Get(id) == nil {
			t.Errorf("entry %s was deleted", id)
		}
	}
}

func TestReleaseHandsTheEntryToTheNextOwnerInTheSameCall(t *testing.T) {
	api := fake.New()
	s, _, n := newSyncer(api)
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := entry("/ns/a/sa/x", 60)
	if _, err := s.Sync(ctx, old, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{entry("/ns/a/sa/x", 30)}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("%v, %+v", err, out)
	}
	oldID := s.opts.IDs.EntryID(old.Tag(), e.Key())
	youngID := s.opts.IDs.EntryID(young.Tag(), e.Key())
	before := len(api.Writes())
	if err := s.Release(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	if w := api.Writes()[before:]; len(w) != 2 || w[0] != "delete "+oldID || w[1] != "create "+youngID {
		t.Fatalf("release wrote %v, want the delete then the next owner's create", w)
	}
	if len(n.uids) == 0 || n.uids[len(n.uids)-1] != young.UID {
		t.Errorf("notified %v, want the next owner", n.uids)
	}
	// The next owner's pass keeps the entry and corrects its TTL in place.
	out, err := s.Sync(ctx, young, ptrs([]entries.Entry{entry("/ns/a/sa/x", 30)}), nil)
	if err != nil || out.Registered[e.Key()] != youngID || api.Get(youngID).X509SvidTtl != 30 || len(api.All()) != 1 {
		t.Fatalf("%v, %+v, %v", err, out, api.All())
	}
}

func TestAnEntryTheHolderStopsWantingGoesToTheNextOwnerInTheSamePass(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	e := entry("/ns/a/sa/x", 0)
	for _, o := range []Owner{old, young} {
		if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(api.Writes())
	if _, err := s.Sync(ctx, old, nil, nil); err != nil {
		t.Fatal(err)
	}
	youngID := s.opts.IDs.EntryID(young.Tag(), e.Key())
	if w := api.Writes()[before:]; len(w) != 2 || !strings.HasPrefix(w[0], "delete ") || w[1] != "create "+youngID {
		t.Fatalf("the holder's pass wrote %v, want its delete then the next owner's create", w)
	}
}

func TestOnlyPodsThatNeededAnEntryWhenItWentUnwantedKeepIt(t *testing.T) {
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{}, uids: map[string][]string{}}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Pods: pods.labels})
	ctx := context.Background()
	o := owner("a", 0)
	web := saEntry("a", "sa", "app", "web")
	set := func(uidLabels ...string) {
		pods.pods["a/sa"], pods.uids["a/sa"] = nil, nil
		for i := 0; i+1 < len(uidLabels); i += 2 {
			pods.uids["a/sa"] = append(pods.uids["a/sa"], uidLabels[i])
			pods.pods["a/sa"] = append(pods.pods["a/sa"], map[string]string{"app": uidLabels[i+1]})
		}
	}
	retained := func(what string, want int) {
		t.Helper()
		out, err := s.Sync(ctx, o, nil, nil)
		if err != nil || out.Retained != want || len(api.All()) != want {
			t.Fatalf("%s: %v, retained %d, %v; want %d", what, err, out.Retained, api.All(), want)
		}
	}
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web}), nil); err != nil {
		t.Fatal(err)
	}
	// When the entry stops being wanted, pod 1 needs it; pod 2 does not.
	set("1", "web", "2", "other")
	retained("pod 1 runs", 1)
	retained("pod 1 still runs", 1)
	// Pod 2 is relabelled into the entry's shape and pod 3 starts; then
	// pod 1 goes. Neither keeps the entry.
	set("2", "web", "3", "web")
	retained("only later pods", 0)

	// Wanted again and then unwanted again, the record starts afresh: the
	// pods that need it now keep it.
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web}), nil); err != nil {
		t.Fatal(err)
	}
	retained("unwanted again", 1)
	// Relabelled out of the shape, a recorded pod no longer keeps it.
	set("2", "other", "3", "other")
	retained("relabelled out", 0)
}

func TestNoPodShapeForSelectorsNoPodCanMatch(t *testing.T) {
	for _, tc := range []struct {
		selectors []string
		judged    bool
	}{
		{[]string{"ns:a", "sa:x"}, true},
		{[]string{"ns:a", "ns:a", "sa:x"}, true},
		{[]string{"ns:a", "sa:x", "pod-label:app:web", "pod-label:app:web"}, true},
		{[]string{"ns:a", "ns:b", "sa:x"}, false},
		{[]string{"ns:a", "sa:x", "sa:y"}, false},
		{[]string{"ns:a", "sa:x", "pod-label:app:web", "pod-label:app:api"}, false},
		{[]string{"ns:a", "sa:x", "pod-name:p"}, false},
		{[]string{"ns:a", "sa:x", "container-name:app", "pod-owner:ReplicaSet:web-1"}, true},
		{[]string{"ns:a", "sa:x", "pod-uid:1234"}, true},
		{[]string{"ns:a", "sa:x", "pod-uid:1234", "pod-uid:5678"}, false},
		{[]string{"ns:a"}, false},
	} {
		e := entries.Entry{}
		for _, v := range tc.selectors {
			e.Selectors = append(e.Selectors, entries.Selector{Type: "k8s", Value: v})
		}
		if _, ok := entries.ShapeOf(&e); ok != tc.judged {
			t.Errorf("%v: judged by pods %v, want %v", tc.selectors, ok, tc.judged)
		}
	}
}

func TestEqualCreationTimesPickTheSameHolderInEveryProcessAndOrder(t *testing.T) {
	ctx := context.Background()
	e := entry("/ns/a/sa/x", 0)
	// Creation times have whole seconds, so equal ones are common.
	a, b := owner("bbbb", 0), owner("aaaa", 0)
	lower := b // the oracle: the smaller UID
	if string(a.UID) < string(b.UID) {
		lower = a
	}
	orders := [][]Owner{{a, b}, {b, a}}
	for _, first := range orders {
		for _, second := range orders {
			api := fake.New()
			p1, _, _ := newSyncer(api)
			for range 2 {
				for _, o := range first {
					if _, err := p1.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			held := api.All()
			if len(held) != 1 || !strings.Contains(held[0].Id, lower.Tag()) {
				t.Fatalf("order %v: held %v, want %s's", first, held, lower)
			}
			writes := len(api.Writes())
			// Another process (a restart or a new leader) in another order.
			p2, _, _ := newSyncer(api)
			for range 2 {
				for _, o := range second {
					if _, err := p2.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if all := api.All(); len(all) != 1 || all[0].Id != held[0].Id || len(api.Writes()) != writes {
				t.Fatalf("orders %v then %v: %v, writes %v", first, second, all, api.Writes()[writes:])
			}
		}
	}
}

func TestOrphansAreConfirmedWithALiveReadBeforeDeletion(t *testing.T) {
	api := fake.New()
	e := entry("/ns/a/sa/x", 0)
	f := entry("/ns/b/sa/y", 0)
	ids := entries.IDScheme{Prefix: "trustplane."}
	// fresh was just created (by a previous leader, say) and is not in the
	// cache yet; gone no longer exists anywhere.
	fresh, gone := owner("fresh", 0), owner("gone", 0)
	freshID := api.Put(e.Proto(ids.EntryID(fresh.Tag(), e.Key())))
	goneID := api.Put(f.Proto(ids.EntryID(gone.Tag(), f.Key())))
	var live int
	s := New(api, Options{IDs: ids, ResyncInterval: time.Minute,
		Alive: func(context.Context) (map[string]bool, error) { return map[string]bool{}, nil },
		AliveNow: func(context.Context) (map[string]bool, error) {
			live++
			return map[string]bool{fresh.Tag(): true}, nil
		}})
	ctx := context.Background()
	if n, err := s.CollectEverywhere(ctx); err != nil || n != 1 || live != 1 {
		t.Fatalf("collected %d, %d live reads: %v", n, live, err)
	}
	if api.Get(freshID) == nil || api.Get(goneID) != nil {
		t.Fatalf("after collection everywhere: %v", api.All())
	}
	// The same holds for the collection after reading a parent.
	goneID = api.Put(f.Proto(ids.EntryID(gone.Tag(), f.Key())))
	if _, err := s.Sync(ctx, owner("other", 0), nil, []spiffeid.ID{parent}); err != nil {
		t.Fatal(err)
	}
	if api.Get(freshID) == nil || api.Get(goneID) != nil || live != 2 {
		t.Fatalf("after collection under a parent (%d live reads): %v", live, api.All())
	}
}

// TestRefusedUpdateHoldsNoStaleEntryBack: an update SPIRE refuses leaves
// its entry in place and replaces nothing, so the owner's other entries
// it no longer wants still go.
func TestRefusedUpdateHoldsNoStaleEntryBack(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	o := owner("a", 0)
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/one", 60), entry("/ns/a/two", 60)}), nil); err != nil {
		t.Fatal(err)
	}
	api.Reject["spiffe://example.org/ns/a/two"] = true
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{entry("/ns/a/two", 120)}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Failed) != 1 || out.Failed[0].Reason != "InvalidArgument" {
		t.Fatalf("outcome = %+v, want the update refused", out)
	}
	var got []string
	for _, e := range api.All() {
		got = append(got, e.SpiffeId.Path)
	}
	if !slices.Equal(got, []string{"/ns/a/two"}) {
		t.Errorf("SPIRE holds %v, want only the entry whose update was refused", got)
	}
}

// TestHeldParentsAfterFollowsTheOwnersEntries: a parent is held while the
// owner has an entry there, through updates (the same entry ID put again)
// and deletions, and never for another owner sharing it.
func TestHeldParentsAfterFollowsTheOwnersEntries(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	a, b := owner("a", 0), owner("b", 0)
	if _, err := s.Sync(ctx, a, ptrs([]entries.Entry{entry("/ns/a/one", 60), entry("/ns/a/two", 60)}), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(ctx, b, ptrs([]entries.Entry{entry("/ns/b/one", 60)}), nil); err != nil {
		t.Fatal(err)
	}
	touched := []spiffeid.ID{parent}
	held := func(o Owner) []string { return s.HeldParentsAfter(o, nil, touched, false) }
	if got := held(a); !slices.Equal(got, []string{parent.String()}) {
		t.Fatalf("after creates: %v", got)
	}
	// An update puts the same entry ID again; one entry then goes.
	if _, err := s.Sync(ctx, a, ptrs([]entries.Entry{entry("/ns/a/one", 120)}), nil); err != nil {
		t.Fatal(err)
	}
	if got := held(a); !slices.Equal(got, []string{parent.String()}) {
		t.Errorf("after an update and a delete: %v", got)
	}
	if _, err := s.Sync(ctx, a, nil, []spiffeid.ID{parent}); err != nil {
		t.Fatal(err)
	}
	if got := held(a); len(got) != 0 {
		t.Errorf("owner a holds nothing, yet: %v", got)
	}
	if got := held(b); !slices.Equal(got, []string{parent.String()}) {
		t.Errorf("owner b after a's entries went: %v", got)
	}
	if got := s.HeldParentsAfter(a, []string{parent.String(), "spiffe://example.org/other"}, touched, false); !slices.Equal(got, []string{"spiffe://example.org/other"}) {
		t.Errorf("a recorded parent not touched must stay: %v", got)
	}
}

// A status write that failed after an incremental pass leaves the next pass
// a stale record of the parents; the parent it added must not drop out,
// or orphan collection after a restart would miss its entries.
func TestHeldParentsAfterKeepsAParentAStaleRecordMisses(t *testing.T) {
	api := fake.New()
	s, _, _ := newSyncer(api)
	ctx := context.Background()
	a := owner("a", 0)
	if _, err := s.Sync(ctx, a, ptrs([]entries.Entry{entry("/ns/a/one", 60)}), nil); err != nil {
		t.Fatal(err)
	}
	other := spiffeid.RequireFromString("spiffe://example.org/spire/agent/k8s_psat/c1/uid-n2")
	onOther := entry("/ns/a/one", 60)
	onOther.ParentID = other
	onOther.Normalize()
	if _, err := s.Sync(ctx, a, ptrs([]entries.Entry{entry("/ns/a/one", 60), onOther}), nil); err != nil {
		t.Fatal(err)
	}
	// The record written after that pass was lost: the next incremental
	// pass, under the first parent only, starts from the one before.
	stale := []string{parent.String()}
	two := entry("/ns/a/two", 60)
	if _, err := s.SyncDelta(ctx, a, []*entries.Entry{&two}, nil); err != nil {
		t.Fatal(err)
	}
	got := s.HeldParentsAfter(a, stale, []spiffeid.ID{parent}, false)
	if !slices.Contains(got, other.String()) {
		t.Errorf("a holds an entry under %s, yet the parents recorded after the pass are %v", other, got)
	}
}
