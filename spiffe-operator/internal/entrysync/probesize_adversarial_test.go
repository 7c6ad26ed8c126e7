package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// cutLargeCreates is a SPIRE behind a proxy that cuts BatchCreateEntry
// requests larger than limit bytes (a body-size limit: nginx's
// client_max_body_size, an Envoy buffer limit), answered as spire.Client
// answers a failed call. Smaller creates, and every other call, go
// through. cutDNSUpdates models the same proxy for updates.
type cutLargeCreates struct {
	*fake.EntryAPI
	limit int
}

func (f *cutLargeCreates) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	size := 0
	for _, e := range in {
		size += proto.Size(e)
	}
	if f.limit == 0 || size <= f.limit {
		return f.EntryAPI.Create(ctx, in)
	}
	err := status.Errorf(codes.ResourceExhausted, "BatchCreateEntry: request of %d bytes cut by the proxy (limit %d) (fake)", size, f.limit)
	out := make([]spire.Result, len(in))
	for i := range out {
		out[i] = spire.Result{Code: codes.ResourceExhausted, Message: err.Error()}
	}
	return out, err
}

// TestAProbeOfOneTakeoverDoesNotVouchForThePutBackOfAll: a younger object
// holds two entries; an older object comes to want both (same fields, no
// probe update). SPIRE sits behind a proxy that cuts create requests
// larger than one of these entries. da6a1db's create probe sends only the
// first takeover's held entry, which fits, so takeOver goes on and deletes
// both holders' entries; the takeovers' create call (two entries) is cut,
// and the put-back, one create call carrying both held entries, is cut
// the same way. The docs' reasoning ("when SPIRE ... fails that call as a
// whole, it would fail the takeover's create and the put-back's too, so
// nothing is taken over") holds for the probe's request, not for the
// larger ones after the delete: the pods of both entries have none, and
// every later pass sends the same two-entry create. da6a1db^ had it too
// (no probe at all); da6a1db does not close it.
func TestAProbeOfOneTakeoverDoesNotVouchForThePutBackOfAll(t *testing.T) {
	ctx := context.Background()
	api := &cutLargeCreates{EntryAPI: fake.New()}
	s := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	older, younger := owner("older", time.Hour), owner("younger", 0)
	if _, err := s.Sync(ctx, older, nil, nil); err != nil {
		t.Fatal(err)
	}
	one := named("/shared-1", "a", "sa", "app", "web")
	two := named("/shared-2", "a", "sa", "app", "api")
	out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{one, two}), nil)
	if err != nil || len(out.Registered) != 2 {
		t.Fatalf("setup: younger's pass: %v, %+v", err, out)
	}
	biggest := 0
	for _, e := range api.All() {
		biggest = max(biggest, proto.Size(e))
	}
	api.limit = biggest + 8 // one entry fits; two do not
	for pass := 1; pass <= 2; pass++ {
		_, err := s.Sync(ctx, older, ptrs([]entries.Entry{one, two}), nil)
		for _, path := range []string{"/shared-1", "/shared-2"} {
			if !holdsPath(api.EntryAPI, path) {
				t.Errorf("pass %d (%v): a proxy cuts create requests over %d bytes; the create probe (one held entry) "+
					"passed, so both takeovers deleted the holder's entries, and the create and the put-back (two "+
					"entries each) were cut: %s, which both objects want, has no entry (writes %v)",
					pass, err, api.limit, path, api.Writes())
			}
		}
		if t.Failed() {
			return
		}
	}
}
