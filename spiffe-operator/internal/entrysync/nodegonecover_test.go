package entrysync

import (
	"context"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
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
