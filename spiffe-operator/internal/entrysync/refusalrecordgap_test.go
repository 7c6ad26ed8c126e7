package entrysync

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestASecondRefusedReplacementStillLeavesTheRunningPodItsEntry: the
// running pod w has old's entry; old is replaced by first (same pod shape),
// which SPIRE refuses, so old stays. The admin tries again with second
// (another SPIFFE ID, the same pod shape), which SPIRE refuses too. Nothing
// SPIRE holds serves w: old must stay, as it did for first.
func TestASecondRefusedReplacementStillLeavesTheRunningPodItsEntry(t *testing.T) {
	api := fake.New()
	s := withPods(api, podW())
	ctx := context.Background()
	o := owner("a", 0)
	old := named("/old", "a", "sa", "app", "web")
	first := named("/ab--one", "a", "sa", "app", "web")
	second := named("/ab--two", "a", "sa", "app", "web")
	api.Reject[first.SpiffeID.String()] = true
	api.Reject[second.SpiffeID.String()] = true
	has := func() bool { return holdsPath(api, "/old") }
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	out, _ := s.Sync(ctx, o, ptrs([]entries.Entry{first}), nil)
	if !has() || out.HeldBack != 1 {
		t.Fatalf("first refused replacement: held back %d, entries %v", out.HeldBack, api.All())
	}
	out, _ = s.Sync(ctx, o, ptrs([]entries.Entry{second}), nil)
	if !has() {
		t.Errorf("pod w runs, served by nothing SPIRE holds, and the entry meant to serve it in old's place is "+
			"refused again, yet old went (held back %d, failed %d)", out.HeldBack, len(out.Failed))
	}
}

// TestAReplacementWhoseCreateNeverLandedDoesNotCostTheRunningPodItsEntry:
// old is replaced by repl (same pod shape) while SPIRE fails the create for
// a transient cause, so the pass fails and old stays. Before the retry, the
// workload stops being wanted altogether (its render fails, or its object
// is deleted with the pod left running). Pod w, which had old's entry, was
// never served by repl, which never existed: nothing serves it, and
// nothing was refused. old must be retained while w runs.
func TestAReplacementWhoseCreateNeverLandedDoesNotCostTheRunningPodItsEntry(t *testing.T) {
	api := fake.New()
	s := withPods(api, podW())
	ctx := context.Background()
	o := owner("a", 0)
	old := named("/old", "a", "sa", "app", "web")
	repl := named("/repl", "a", "sa", "app", "web")
	has := func() bool { return holdsPath(api, "/old") }
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	api.Fail[repl.SpiffeID.String()] = codes.Unavailable
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{repl}), nil); err == nil || !has() {
		t.Fatalf("transient create failure: %v, entries %v", err, api.All())
	}
	delete(api.Fail, repl.SpiffeID.String())
	out, err := s.Sync(ctx, o, nil, nil)
	if err != nil || !has() || out.Retained != 1 {
		t.Errorf("pod w runs and nothing SPIRE holds serves it (its replacement never landed), yet old went: "+
			"err %v, retained %d, entries %d", err, out.Retained, len(api.All()))
	}
}

// TestTheWithdrawalRecordGoesWithAnEntryDeletedOutsideTheOperator: an entry
// kept for a pod is deleted by hand; the resync finds it gone. Its record
// of the pods that needed it must not stay in memory for ever.
func TestTheWithdrawalRecordGoesWithAnEntryDeletedOutsideTheOperator(t *testing.T) {
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{"a/sa": {{"app": "web"}}}, uids: map[string][]string{"a/sa": {"w"}}}
	c := &clock{now: t0}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Pods: pods.labels, Now: c.Now})
	ctx := context.Background()
	o := owner("a", 0)
	old := named("/old", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, o, nil, nil); err != nil || out.Retained != 1 {
		t.Fatalf("withdrawal: %v, %+v", err, out)
	}
	for _, e := range api.All() {
		api.Remove(e.Id)
	}
	c.Add(2 * time.Minute)
	pods.mu.Lock()
	pods.pods["a/sa"], pods.uids["a/sa"] = nil, nil
	pods.mu.Unlock()
	for i := 0; i < 2; i++ {
		if _, err := s.Sync(ctx, o, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	n := len(s.withdrawn)
	s.mu.Unlock()
	if len(api.All()) != 0 || n != 0 {
		t.Errorf("the entry is gone from SPIRE and its pod from the cluster, yet %d withdrawal records stay in memory", n)
	}
}
