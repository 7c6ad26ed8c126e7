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

// dnsUpdateCalls is a SPIRE whose BatchUpdateEntry calls for the DNS-name
// mask fail: as a whole (whole), the way spire.Client answers a call a
// proxy cut (the request carrying many DNS names is the large one), or
// per entry with Internal, the call itself succeeding. Other calls are
// answered.
type dnsUpdateCalls struct {
	*fake.EntryAPI
	whole, perEntry bool
}

func (f *dnsUpdateCalls) Update(ctx context.Context, in []*types.Entry, m *types.EntryMask) ([]spire.Result, error) {
	if !m.GetDnsNames() || !f.whole && !f.perEntry {
		return f.EntryAPI.Update(ctx, in, m)
	}
	out := make([]spire.Result, len(in))
	if f.whole {
		err := status.Error(codes.Unavailable, "BatchUpdateEntry: upstream connect error or disconnect/reset before headers (fake proxy)")
		for i := range out {
			out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
		}
		return out, err
	}
	for i := range out {
		out[i] = spire.Result{Code: codes.Internal, Message: "failed to update entry: datastore error (fake)"}
	}
	return out, nil
}

// TestAnUpdateCallSpireFailsDoesNotKeepAWithdrawnGrantOnAHeldBackEntry:
// the policy withdraws admin, and b/ops's entry is replaced by one with a
// new SPIFFE ID whose create SPIRE fails (Internal, a datastore error): the
// old b/ops entry is held back, and trimsOfHeldBack takes admin off it. In
// the same pass a.web's DNS names change. When SPIRE fails a.web's update
// per entry, admin is taken off (control). When the DNS-mask call fails as
// a whole, execute returns before trimsOfHeldBack, and the held-back entry
// keeps admin, the grant the policy withdrew, for as long as that call
// fails. Same gap on the old code; 9c20d03 says a failed call no longer
// keeps the pass's grant trims from being made.
func TestAnUpdateCallSpireFailsDoesNotKeepAWithdrawnGrantOnAHeldBackEntry(t *testing.T) {
	for _, whole := range []bool{false, true} {
		name := map[bool]string{false: "per-entry failure (control)", true: "whole call failure"}[whole]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			api := &dnsUpdateCalls{EntryAPI: fake.New()}
			s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: podW().labels})
			o := owner("policy", time.Hour)
			o.Grants = entries.Grants{Admin: true}
			web := saEntry("a", "web")
			web.DNSNames = []string{"web.a.svc"}
			ops := named("/ops", "b", "ops")
			ops.Admin = true
			if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web, ops}), nil); err != nil {
				t.Fatal(err)
			}
			o.Grants = entries.Grants{}
			web.DNSNames = []string{"web2.a.svc"}
			ops2 := named("/ops2", "b", "ops")
			api.Fail[ops2.SpiffeID.String()] = codes.Internal
			api.whole, api.perEntry = whole, !whole
			if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{web, ops2}), nil); err == nil {
				t.Fatal("the failed pass reported no error")
			}
			if !holdsPath(api.EntryAPI, "/ops") {
				t.Fatalf("the old b/ops entry went while its replacement's create failed (writes %v)", api.Writes())
			}
			if adminOf(t, api.EntryAPI, "/ops") {
				t.Errorf("%s: the policy withdrew admin; the old b/ops entry is held back (its replacement's create failed), "+
					"and SPIRE failed only a.web's DNS update, yet b/ops is still admin (writes %v)", name, api.Writes())
			}
		})
	}
}
