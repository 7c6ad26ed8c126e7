package entrysync

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// boomDNS is a DNS name a tenant renders (a label value in a DNS name
// template) that makes SPIRE's datastore fail every write carrying it with
// Internal, the code the operator takes as a cause that may pass.
const boomDNS = "boom.a.svc"

// failsUpdatesWithDNS is a SPIRE whose BatchUpdateEntry answers, per
// entry, Internal (a datastore error) for every entry that carries
// boomDNS, the call itself succeeding; other entries are updated.
type failsUpdatesWithDNS struct {
	*fake.EntryAPI
}

func (f *failsUpdatesWithDNS) Update(ctx context.Context, in []*types.Entry, m *types.EntryMask) ([]spire.Result, error) {
	out := make([]spire.Result, len(in))
	for i, e := range in {
		if slices.Contains(e.DnsNames, boomDNS) {
			out[i] = spire.Result{Code: codes.Internal, Message: "failed to update entry: datastore error (fake)"}
			continue
		}
		res, err := f.EntryAPI.Update(ctx, []*types.Entry{e}, m)
		if err != nil {
			return nil, err
		}
		out[i] = res[0]
	}
	return out, nil
}

// adminOf returns whether SPIRE's entry with the SPIFFE ID path is admin.
func adminOf(t *testing.T, api *fake.EntryAPI, path string) bool {
	t.Helper()
	for _, e := range api.All() {
		if e.SpiffeId.Path == path {
			return e.Admin
		}
	}
	t.Fatalf("SPIRE holds no entry %s: %v", path, api.All())
	return false
}

// TestAnUpdateSpireFailsForAPassingCauseDoesNotKeepAWithdrawnGrant: the
// policy withdraws admin while the tenant's label renders a DNS name
// (boomDNS) that SPIRE's datastore fails with Internal every time. The
// update carrying both fails on every retry; the entry must still lose
// admin (a trim asks for the grants alone). On the old code only a
// refused update was trimmed, and a failure SPIRE words as passing kept
// admin for as long as the tenant kept the label.
func TestAnUpdateSpireFailsForAPassingCauseDoesNotKeepAWithdrawnGrant(t *testing.T) {
	ctx := context.Background()
	api := &failsUpdatesWithDNS{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: podW().labels})
	o := owner("policy", time.Hour)
	o.Grants = entries.Grants{Admin: true}
	e := named("/web", "a", "sa", "app", "web")
	e.Admin, e.DNSNames = true, []string{"web.a.svc"}
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}

	// The policy withdraws admin; the tenant relabels its workload.
	o.Grants = entries.Grants{}
	now := e
	now.Admin, now.DNSNames = false, []string{boomDNS}
	var err error
	for range 3 { // the pass and its retries
		_, err = s.Sync(ctx, o, ptrs([]entries.Entry{now}), nil)
	}
	if err == nil {
		t.Fatal("the failed update reported no error")
	}
	if adminOf(t, api.EntryAPI, "/web") {
		t.Errorf("the policy withdrew admin; SPIRE failed the update that also carries the tenant's DNS name (%v), "+
			"and after 3 passes the entry is still admin (writes %v)", err, api.Writes())
	}
}

// TestATakeoverProbeFailingForAPassingCauseDoesNotBlockEveryWithdrawal: an
// older policy takes over a key a younger one holds in the tenant's
// namespace; its probe (the held entry updated to its own fields) carries
// the tenant's DNS name and fails with Internal on every pass. The rest of
// the pass must go on: the same policy withdraws admin from another
// namespace's entry. On the old code the failed probe ended the pass before
// its updates, so one tenant's label kept admin on every entry of the
// policy.
func TestATakeoverProbeFailingForAPassingCauseDoesNotBlockEveryWithdrawal(t *testing.T) {
	ctx := context.Background()
	api := &failsUpdatesWithDNS{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	older, younger := owner("older", time.Hour), owner("younger", 0)
	older.Grants = entries.Grants{Admin: true}
	other := saEntry("b", "ops")
	other.Admin = true
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{other}), nil); err != nil {
		t.Fatal(err)
	}
	shared := saEntry("a", "sa")
	if out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{shared}), nil); err != nil || len(out.Registered) != 1 {
		t.Fatalf("the younger policy's entry: %v, %+v", err, out)
	}

	// The older policy withdraws admin and comes to select the tenant's
	// workload, whose label renders boomDNS.
	older.Grants = entries.Grants{}
	plain := other
	plain.Admin = false
	mine := shared
	mine.DNSNames = []string{boomDNS}
	var err error
	for range 3 {
		_, err = s.Sync(ctx, older, ptrs([]entries.Entry{plain, mine}), nil)
	}
	if err == nil {
		t.Fatal("the failed probe reported no error")
	}
	if adminOf(t, api.EntryAPI, "/ns/b/sa/ops") {
		t.Errorf("the policy withdrew admin from b/ops, yet after 3 passes it is still admin: the tenant's failing takeover "+
			"probe in namespace a ends each pass before its updates (%v; writes %v)", err, api.Writes())
	}
}

// TestAPutBackDoesNotRestoreAGrantItsHolderWithdrewMeanwhile: a younger
// policy holds an admin entry that an older one, rendering the same key
// without admin, takes over. While the takeover's create is in flight (the
// held entry deleted), the younger policy withdraws admin and passes,
// finding nothing to trim. The create then fails and the held entry is put
// back: without the grant its holder withdrew meanwhile. On the old code
// the put-back restored the plan-time copy, admin included, and told no
// one.
func TestAPutBackDoesNotRestoreAGrantItsHolderWithdrewMeanwhile(t *testing.T) {
	ctx := context.Background()
	api, s, older, younger, heldID, e := adminEntryTakenOverByAFailingCreate(t)
	withdrawn := named("/shared", "a", "sa", "app", "web") // admin withdrawn
	api.onCreate = func() {
		younger.Grants = entries.Grants{}
		if _, err := s.Sync(ctx, younger, ptrs([]entries.Entry{withdrawn}), nil); err != nil {
			t.Errorf("the younger policy's pass: %v", err)
		}
	}
	_, _ = s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	got := api.Get(heldID)
	if got == nil {
		t.Fatalf("the held entry was to be put back: %v", api.Writes())
	}
	if got.Admin {
		t.Errorf("the younger policy withdrew admin and passed; putBack re-created its entry %s with admin (writes %v)",
			heldID, api.Writes())
	}
}

// TestAFailedPutBackDoesNotStopThePassesOtherWithdrawals: an older policy
// takes over a younger one's entry; its create fails and so does the
// put-back of the held entry (SPIRE fails every create of that SPIFFE ID).
// The same pass withdraws admin from the older policy's entry of another
// namespace: that must still happen, and the failure be retried. On the
// old code the failed put-back ended the pass before its updates.
func TestAFailedPutBackDoesNotStopThePassesOtherWithdrawals(t *testing.T) {
	ctx := context.Background()
	api, s, older, _, _, e := adminEntryTakenOverByAFailingCreate(t)
	older.Grants = entries.Grants{Admin: true}
	other := saEntry("b", "ops")
	other.Admin = true
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{other}), nil); err != nil {
		t.Fatal(err)
	}
	api.Fail[e.SpiffeID.String()] = codes.Internal
	older.Grants = entries.Grants{}
	plain := other
	plain.Admin = false
	if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{plain, e}), nil); err == nil {
		t.Fatal("the failed create and put-back reported no error")
	}
	if adminOf(t, api.EntryAPI, "/ns/b/sa/ops") {
		t.Errorf("the policy withdrew admin from b/ops, yet a failed put-back elsewhere kept it (writes %v)", api.Writes())
	}
}
