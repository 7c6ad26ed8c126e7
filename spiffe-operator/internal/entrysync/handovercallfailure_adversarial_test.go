package entrysync

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAHandOverIsNotMadeInAPassWhoseCreateCallFailed: two policies want
// b/ops's entry; the older holds it, the younger waits (masked). The older
// drops it while it adds a.web, and SPIRE fails the BatchCreateEntry call
// as a whole (Unavailable: a proxy cutting creates, a server shedding
// writes). SPIRE refuses two identical entries, so handing b/ops over is
// break-before-make: delete the older's entry, then create the younger's
// in a second create call. Since 9c20d03 the pass goes on after the failed
// create call; withoutAccountsOf holds back only a/web's account, so
// deleteStale deletes b/ops's entry and createFor's create, which fails
// as the pass's own just did, leaves the identity the younger policy
// still wants with no entry at all until creates go through again. Before
// 9c20d03 the failed create call ended the pass: b/ops kept its entry.
func TestAHandOverIsNotMadeInAPassWhoseCreateCallFailed(t *testing.T) {
	ctx := context.Background()
	api := &createCallFails{EntryAPI: fake.New()}
	s, _, _ := newSyncer(api)
	older, younger := owner("older", time.Hour), owner("younger", 0)
	ops := saEntry("b", "ops")
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{ops}), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{ops}), nil)
	if err != nil || len(out.Masked) != 1 {
		t.Fatalf("younger's pass: %v, %+v", err, out)
	}
	api.code = codes.Unavailable
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{saEntry("a", "web")}), nil); err == nil {
		t.Fatal("the failed create call reported no error")
	}
	if !holdsPath(api.EntryAPI, "/ns/b/sa/ops") {
		t.Errorf("SPIRE failed the pass's create call as a whole, yet the pass deleted b/ops's entry to hand it over "+
			"to the younger policy, which still wants it, with a create that failed too: the identity has no entry "+
			"(writes %v)", api.Writes())
	}
}
