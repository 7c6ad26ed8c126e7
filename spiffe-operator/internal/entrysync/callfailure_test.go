package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// failingCalls is a SPIRE whose BatchCreateEntry, or BatchUpdateEntry for
// entries of one mask, fails as a whole call (a server that answers the
// other calls of the pass), as a proxy that cuts one large request or a
// server under load does.
type failingCalls struct {
	*fake.EntryAPI
	creates  bool
	dnsMasks bool
}

func (f *failingCalls) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	if f.creates {
		return callFailed(len(in), "create")
	}
	return f.EntryAPI.Create(ctx, in)
}

func (f *failingCalls) Update(ctx context.Context, in []*types.Entry, m *types.EntryMask) ([]spire.Result, error) {
	if f.dnsMasks && m.GetDnsNames() {
		return callFailed(len(in), "update")
	}
	return f.EntryAPI.Update(ctx, in, m)
}

// callFailed answers as spire.Client does for a call that failed: each of
// the n items gets the call's code, and the error says why.
func callFailed(n int, what string) ([]spire.Result, error) {
	err := status.Errorf(codes.Unavailable, "%s call cut (fake)", what)
	out := make([]spire.Result, n)
	for i := range out {
		out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
	}
	return out, err
}

// TestACreateCallSpireFailsDoesNotStopThePassesWithdrawals: the policy
// withdraws admin from b/ops while a tenant's new workload needs an entry,
// and SPIRE fails the create call as a whole. The withdrawal must not wait
// for SPIRE to take the new entry: on the old code the pass ended at the
// failed call, before its updates, and b/ops kept admin for as long as
// the creates failed.
func TestACreateCallSpireFailsDoesNotStopThePassesWithdrawals(t *testing.T) {
	ctx := context.Background()
	api := &failingCalls{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: podW().labels})
	o := owner("policy", time.Hour)
	o.Grants = entries.Grants{Admin: true}
	ops := saEntry("b", "ops")
	ops.Admin = true
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{ops}), nil); err != nil {
		t.Fatal(err)
	}
	o.Grants = entries.Grants{}
	ops.Admin = false
	api.creates = true
	_, err := s.Sync(ctx, o, ptrs([]entries.Entry{ops, saEntry("a", "web")}), nil)
	if err == nil {
		t.Fatal("the failed create call reported no error")
	}
	if adminOf(t, api.EntryAPI, "/ns/b/sa/ops") {
		t.Errorf("the policy withdrew admin from b/ops; SPIRE failed the create call of a.web (%v), and the entry is still admin (writes %v)",
			err, api.Writes())
	}
	api.creates = false
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{ops, saEntry("a", "web")}), nil); err != nil {
		t.Fatalf("the pass after SPIRE answers again: %v", err)
	}
	if !holdsPath(api.EntryAPI, "/ns/a/sa/web") {
		t.Errorf("the entry whose create call failed was not created once SPIRE answered (writes %v)", api.Writes())
	}
}

// TestAnUpdateCallSpireFailsDoesNotStopTheOtherMasksUpdates: updates go
// out one call per mask. SPIRE fails the call of the updates that change
// DNS names; the withdrawal of admin, sent under another mask, must still
// be made. On the old code the first failed call ended the pass.
func TestAnUpdateCallSpireFailsDoesNotStopTheOtherMasksUpdates(t *testing.T) {
	ctx := context.Background()
	api := &failingCalls{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: podW().labels})
	o := owner("policy", time.Hour)
	o.Grants = entries.Grants{Admin: true}
	ops, web := saEntry("b", "ops"), saEntry("a", "web")
	ops.Admin, web.DNSNames = true, []string{"web.a.svc"}
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{ops, web}), nil); err != nil {
		t.Fatal(err)
	}
	o.Grants = entries.Grants{}
	ops.Admin, web.DNSNames = false, []string{"web2.a.svc"}
	api.dnsMasks = true
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web, ops}), nil); err == nil {
		t.Fatal("the failed update call reported no error")
	}
	if adminOf(t, api.EntryAPI, "/ns/b/sa/ops") {
		t.Errorf("the policy withdrew admin from b/ops; SPIRE failed the call of another mask's updates, and the entry is still admin (writes %v)",
			api.Writes())
	}
}
