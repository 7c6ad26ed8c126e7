package entrysync

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAWorkloadMovedToAnotherAccountKeepsItsOldEntryWhileTheNewCreateFails:
// a Deployment moves from service account x to y; its old ReplicaSet's pod
// (account x) still runs. SPIRE fails the create of the entry of y with
// Internal: the old entry (account x) must stay for the old pod.
func TestAWorkloadMovedToAnotherAccountKeepsItsOldEntryWhileTheNewCreateFails(t *testing.T) {
	api := fake.New()
	pods := &podSet{pods: map[string][]map[string]string{"a/x": {{"app": "web"}}}, uids: map[string][]string{"a/x": {"w"}}}
	s := withPods(api, pods)
	ctx := context.Background()
	o := owner("a", 0)
	old, moved := named("/ns/a/sa/x", "a", "x"), named("/ns/a/sa/y", "a", "y")
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	api.Fail[moved.SpiffeID.String()] = codes.Internal
	for i := 0; i < 2; i++ {
		if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{moved}), nil); err == nil {
			t.Fatal("the failed create reported no error")
		}
		if !holdsPath(api, "/ns/a/sa/x") {
			t.Fatalf("pass %d: the old account's entry went while its pod runs (writes %v)", i, api.Writes())
		}
	}
}
