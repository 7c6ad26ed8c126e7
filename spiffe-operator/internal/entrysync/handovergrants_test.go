package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAHandOverDoesNotPassOnTheReleasedHoldersGrants: an admin policy
// (old) and a general policy (young) render the same entry key (same
// parent, SPIFFE ID and selectors). old, the oldest, holds it with admin;
// young is masked. Deleting the admin policy revokes its grant. Its
// release hands the entry over to young, and young's pass then writes
// young's own fields; here SPIRE refuses them (a trust domain of young's
// federatesWith whose bundle it lacks; a DNS name a tenant chooses through
// {name} would do too), and a refused update leaves the entry as it was.
// So the hand-over itself must not carry the admin grant: on the old code
// it did, and the workloads kept SPIRE admin under an owner that never
// granted it for as long as the refusal lasted.
func TestAHandOverDoesNotPassOnTheReleasedHoldersGrants(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	old, young := owner("admin-policy", time.Hour), owner("general-policy", 0)

	admin := named("/ns/ops/sa/tool", "ops", "tool")
	admin.Admin = true
	general := named("/ns/ops/sa/tool", "ops", "tool")
	general.FederatesWith = []string{"partner.example"}
	general.Normalize()
	if admin.Key() != general.Key() {
		t.Fatal("setup: the two policies must render one key")
	}
	api.MissingBundles["partner.example"] = true

	if _, err := s.Sync(ctx, old, ptrs([]entries.Entry{admin}), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Sync(ctx, young, ptrs([]entries.Entry{general}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: the general policy must be masked by the admin one: %v, %+v", err, out)
	}

	// The admin policy is deleted: its grant is revoked.
	if err := s.Release(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	// The general policy's pass, notified of the hand-over, tries to
	// correct the fields, and is refused.
	out, _ := s.Sync(ctx, young, ptrs([]entries.Entry{general}), nil)

	for _, e := range api.All() {
		if e.Admin {
			t.Errorf("the only admin policy was deleted, yet SPIRE holds the admin entry %s (%s) for the general policy, "+
				"which never granted admin (its pass: failed %+v); writes %v", e.Id, e.SpiffeId.Path, out.Failed, api.Writes())
		}
	}
}
