package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// adminEntryTakenOverByAFailingCreate sets up the put-back specs: the
// younger owner holds an admin entry (heldID); the older one, known but
// wanting nothing yet, is about to render the same key without admin (e),
// and the create of its takeover will fail once.
func adminEntryTakenOverByAFailingCreate(t *testing.T) (api *slowList, s *Syncer, older, younger Owner, heldID string, e entries.Entry) {
	t.Helper()
	api = &slowList{EntryAPI: fake.New()}
	s = New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: podW().labels})
	ctx := context.Background()
	older, younger = owner("older", time.Hour), owner("younger", 0)
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	held := named("/shared", "a", "sa", "app", "web")
	held.Admin = true
	out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{held}), nil)
	if err != nil {
		t.Fatal(err)
	}
	e = named("/shared", "a", "sa", "app", "web") // same key, not admin
	api.FailOnce[e.SpiffeID.String()] = codes.Internal
	return api, s, older, younger, out.Registered[held.Key()], e
}

// TestAPutBackDoesNotResurrectTheEntryOfAnOwnerReleasedMeanwhile: the
// younger holder's entry is an admin one; the older object renders the
// same key without admin and takes it over. While its create is in
// flight, the younger object is deleted (released). The create fails: the
// holder's entry must not come back, admin and all, and the older
// object's retry must register its own.
func TestAPutBackDoesNotResurrectTheEntryOfAnOwnerReleasedMeanwhile(t *testing.T) {
	ctx := context.Background()
	api, s, older, younger, heldID, e := adminEntryTakenOverByAFailingCreate(t)
	api.onCreate = func() {
		// The younger object is deleted meanwhile.
		if err := s.Release(ctx, younger, nil); err != nil {
			t.Errorf("release: %v", err)
		}
	}
	_, _ = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	if got := api.Get(heldID); got != nil {
		t.Errorf("the younger object was released, yet its entry %s (admin=%v) was re-created by putBack: %v",
			heldID, got.Admin, api.Writes())
	}
	out, err := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.Registered[e.Key()]; !ok {
		t.Errorf("the older object's retry does not register the entry (masked %+v): the orphan blocks it until orphan collection",
			out.Masked)
	}
}

// TestAnEntryPutBackKeepsItsWithdrawalRecord: h withdrew an entry kept
// for pod w alone. o takes its key over, the create fails, and h's entry
// is put back. Its withdrawal record must come back with it: once o no
// longer wants the key either and w is replaced by w2, started after the
// withdrawal, the entry must go.
func TestAnEntryPutBackKeepsItsWithdrawalRecord(t *testing.T) {
	api := fake.New()
	pods := podW()
	s := withPods(api, pods)
	ctx := context.Background()
	h, o := owner("h", time.Hour), owner("o", 0)
	e := named("/shared", "a", "sa", "app", "web")
	if _, err := s.Sync(ctx, h, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	// h withdraws e while w runs: retained, record {w}.
	if out, err := s.Sync(ctx, h, nil, nil); err != nil || out.Retained != 1 {
		t.Fatalf("setup: retained %d, %v", out.Retained, err)
	}
	// o comes to want the same key; its create after the delete fails once.
	api.FailOnce[e.SpiffeID.String()] = codes.Internal
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err == nil {
		t.Fatal("setup: the failed create reported no error")
	}
	if !holdsPath(api, "/shared") {
		t.Fatalf("setup: not put back: %v", api.Log)
	}
	// o withdraws it too (before its retry); then w is replaced by w2.
	if _, err := s.Sync(ctx, o, nil, nil); err != nil {
		t.Fatal(err)
	}
	pods.mu.Lock()
	pods.uids["a/sa"] = []string{"w2"}
	pods.mu.Unlock()
	s.PodsChanged("a")
	if _, err := s.Sync(ctx, h, nil, nil); err != nil {
		t.Fatal(err)
	}
	if holdsPath(api, "/shared") {
		t.Errorf("w2 started after the identity was withdrawn by every owner, yet keeps it: the put-back entry lost its withdrawal record (entries %v)",
			api.All())
	}
}

// TestATakeoverCreateSpireRenamesStillPutsTheHoldersEntryBack: SPIRE
// creates the older object's entry under an ID of its own (a server that
// ignores the IDs it is given, met during a rolling upgrade: the next call
// lands on an upgraded one); the operator deletes it as one it cannot own,
// so the create did not land as asked and the holder's entry must be put
// back.
func TestATakeoverCreateSpireRenamesStillPutsTheHoldersEntryBack(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	s, older, held := sharedByYounger(t, api, e)
	s.api = &renamesOnce{EntryAPI: api}
	out, _ := s.Sync(context.Background(), older, ptrs([]entries.Entry{e}), nil)
	if !holdsPath(api, "/shared") {
		t.Errorf("the takeover's create failed (%+v) and no entry of the key is left: holder %s deleted, nothing put back; log %v",
			out.Failed, held, strings.Join(api.Log, ", "))
	}
}

// renamesOnce is a SPIRE whose next create call ignores the entry IDs it
// is given, as a server not yet upgraded does; the calls after it keep
// them.
type renamesOnce struct {
	*fake.EntryAPI
	done bool
}

func (r *renamesOnce) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	r.IgnoreIDs = !r.done
	r.done = true
	defer func() { r.IgnoreIDs = false }()
	return r.EntryAPI.Create(ctx, in)
}

// TestAPutBackRacingAReleaseDoesNotOutliveTheReleasedOwner: as above, but
// the younger object is released while the put-back's create is in
// flight, after the put-back found it still claimed. The release could
// not see the entry being re-created; the put-back must delete it once it
// lands, or it stays in SPIRE, owned by a deleted object, until orphan
// collection reads that parent again.
func TestAPutBackRacingAReleaseDoesNotOutliveTheReleasedOwner(t *testing.T) {
	ctx := context.Background()
	api, s, older, younger, heldID, e := adminEntryTakenOverByAFailingCreate(t)
	api.onCreate = func() {
		// The takeover's create: the next create is the put-back's.
		api.mu.Lock()
		api.onCreate = func() {
			if err := s.Release(ctx, younger, nil); err != nil {
				t.Errorf("release: %v", err)
			}
		}
		api.mu.Unlock()
	}
	_, _ = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	if got := api.Get(heldID); got != nil {
		t.Errorf("the younger object was released while its entry %s was being put back, and the entry stayed: %v",
			heldID, api.Writes())
	}
	out, err := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.Registered[e.Key()]; !ok {
		t.Errorf("the older object's retry does not register the entry (masked %+v)", out.Masked)
	}
}
