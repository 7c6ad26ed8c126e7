package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAnEntryUnderAGoneNodeStaysForItsPodWhileAnotherNodeHoldsOne: per-node
// parents; web runs w on gone-1 and w2 on n2. The Node of gone-1 goes while
// w still runs there: the owner wants web under n2 only. Only gone-1's
// agent can serve w, so the entry under n2 does not cover it, and the
// entry under gone-1 must stay while w runs.
func TestAnEntryUnderAGoneNodeStaysForItsPodWhileAnotherNodeHoldsOne(t *testing.T) {
	api := fake.New()
	pods := &podSet{
		pods:  map[string][]map[string]string{"a/sa": {{"app": "web"}, {"app": "web"}}},
		uids:  map[string][]string{"a/sa": {"w", "w2"}},
		nodes: map[string][]string{"a/sa": {"gone-1", "n2"}},
	}
	s := withPods(api, pods)
	ctx := context.Background()
	o := perNodeOwner("policy")
	web := named("/web", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs(underNodes(web, "gone-1", "n2")), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, o, ptrs(underNodes(web, "n2")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !holdsUnder(api, "/web", "gone-1") {
		t.Errorf("w still runs on gone-1, yet its entry there went (retained %d); entries: %v", out.Retained, api.All())
	}
}

// TestAPutBackSpireRenamesDoesNotOutliveBothObjects: SPIRE ignores the IDs
// it is given; the older object's create is renamed and deleted, and the
// holder's entry, put back, is renamed too: it must be deleted as well,
// or it would be an entry no object owns. Once both objects are deleted,
// no entry of theirs may remain.
func TestAPutBackSpireRenamesDoesNotOutliveBothObjects(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	s, older, _ := sharedByYounger(t, api, e)
	ctx := context.Background()
	api.IgnoreIDs = true
	_, _ = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	for _, o := range []Owner{owner("younger", 0), older} {
		if err := s.Release(ctx, o, nil); err != nil {
			t.Fatal(err)
		}
	}
	if holdsPath(api, "/shared") {
		t.Errorf("both objects are deleted, yet SPIRE still holds /shared: %v; log %s", api.All(), strings.Join(api.Log, ", "))
	}
}

// TestAGoneNodesEntryGoesWhenOnlyAnUnscheduledPodIsLeft: web ran w on
// gone-1 (its Node since deleted) and runs w2 on n2; p is not scheduled.
// w goes: no pod runs on gone-1 any more. An unscheduled pod needs no
// node's entry, so it must not keep the entry under gone-1.
func TestAGoneNodesEntryGoesWhenOnlyAnUnscheduledPodIsLeft(t *testing.T) {
	api := fake.New()
	pods := &podSet{
		pods:  map[string][]map[string]string{"a/sa": {{"app": "web"}, {"app": "web"}, {"app": "web"}}},
		uids:  map[string][]string{"a/sa": {"w", "w2", "p"}},
		nodes: map[string][]string{"a/sa": {"gone-1", "n2", ""}},
	}
	s := withPods(api, pods)
	ctx := context.Background()
	o := perNodeOwner("policy")
	web := named("/web", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, o, ptrs(underNodes(web, "gone-1", "n2")), nil); err != nil {
		t.Fatal(err)
	}
	pods.mu.Lock()
	pods.pods["a/sa"], pods.uids["a/sa"], pods.nodes["a/sa"] = pods.pods["a/sa"][1:], pods.uids["a/sa"][1:], pods.nodes["a/sa"][1:]
	pods.mu.Unlock()
	out, err := s.Sync(ctx, o, ptrs(underNodes(web, "n2")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if holdsUnder(api, "/web", "gone-1") {
		t.Errorf("no pod runs on gone-1 (p is not scheduled, w2 has n2's entry), yet the entry under gone-1 stays (retained %d): %v",
			out.Retained, api.All())
	}
}

// chunkedRenamer is a SPIRE whose first create call, and the first batch
// of its second, ignore the entry IDs they are given; the rest of the
// second call fails as a lost connection does.
type chunkedRenamer struct {
	*fake.EntryAPI
	calls int
}

func (c *chunkedRenamer) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	c.calls++
	defer func() { c.IgnoreIDs = false }()
	switch c.calls {
	case 1:
		c.IgnoreIDs = true
		return c.EntryAPI.Create(ctx, in)
	case 2:
		c.IgnoreIDs = true
		res, err := c.EntryAPI.Create(ctx, in[:1])
		if err != nil {
			return res, err
		}
		err = status.Error(codes.Unavailable, "batch 2: connection reset")
		for range in[1:] {
			res = append(res, spire.Result{Code: codes.Unavailable, Message: err.Error()})
		}
		return res, err
	}
	return c.EntryAPI.Create(ctx, in)
}

// TestAPutBackSpireRenamesInAPartlyFailedCallDoesNotOutliveBothObjects:
// the put-back call lands one entry under an ID of SPIRE's own and fails
// for the other; the renamed entry must still be deleted, or nothing
// could ever delete it.
func TestAPutBackSpireRenamesInAPartlyFailedCallDoesNotOutliveBothObjects(t *testing.T) {
	api := fake.New()
	s := withPods(api, podW())
	ctx := context.Background()
	older, younger := owner("older", time.Hour), owner("younger", 0)
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	both := []entries.Entry{named("/s1", "a", "sa", "app", "web"), named("/s2", "a", "sa", "app", "db")}
	if _, err := s.Sync(ctx, younger, ptrs(both), nil); err != nil {
		t.Fatal(err)
	}
	s.api = &chunkedRenamer{EntryAPI: api}
	_, _ = s.Sync(ctx, older, ptrs(both), nil)
	for _, o := range []Owner{younger, older} {
		if err := s.Release(ctx, o, nil); err != nil {
			t.Fatal(err)
		}
	}
	if left := api.All(); len(left) != 0 {
		t.Errorf("both objects are deleted, yet SPIRE still holds %v", left)
	}
}
