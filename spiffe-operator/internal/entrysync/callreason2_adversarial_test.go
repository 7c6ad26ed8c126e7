package entrysync_test

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// cutDNSUpdates is a SPIRE behind a proxy that cuts BatchUpdateEntry calls
// carrying the DNS-name mask (the large requests), answered as
// spire.Client answers a failed call; other calls go through.
type cutDNSUpdates struct {
	*fake.EntryAPI
	cut bool
}

func (f *cutDNSUpdates) Update(ctx context.Context, in []*types.Entry, m *types.EntryMask) ([]spire.Result, error) {
	if !f.cut || !m.GetDnsNames() {
		return f.EntryAPI.Update(ctx, in, m)
	}
	err := status.Error(codes.Unavailable, "BatchUpdateEntry: upstream connect error or disconnect/reset before headers (fake proxy)")
	out := make([]spire.Result, len(in))
	for i := range out {
		out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
	}
	return out, err
}

// TestAnUpdateCallSpireFailsIsNotReportedAsSpireChangedThroughItsTrim:
// the route TestACreateCallSpireFailsIsNotReportedAsSpireChanged closed for
// a create call, taken by an update call. The policy withdraws admin from
// a.web and changes its DNS names (one update, mask admin+dnsNames), and
// SPIRE fails that update call as a whole (Unavailable). updateAll then
// sends the grant trim of the failed update (mask admin), which finds the
// entry gone (deleted by hand since the view was read): NotFound, so the
// trims' updateAll returns ErrStale, and updateAll joins it, wrapped
// (%w), with the whole call's error. execute takes the joined error as
// the call's (errWholeCall) and afterFailedCall wraps it with %w, so the
// pass's error still wraps ErrStale, which SpireError checks first: the
// pass is reported SpireChanged ("retried at once"), not SpireUnavailable,
// and the outage is hidden behind a hand edit. Before 9c20d03 updateAll
// returned at the failed call, before any trim: SpireUnavailable.
func TestAnUpdateCallSpireFailsIsNotReportedAsSpireChangedThroughItsTrim(t *testing.T) {
	ctx := context.Background()
	api := &cutDNSUpdates{EntryAPI: fake.New()}
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	o := entrysync.Owner{Kind: "SpiffeRegistration", Name: "p", UID: k8stypes.UID("p-0000-0000-0000-000000000000"),
		Created: time.Now(), Grants: entries.Grants{Admin: true}}
	web := entryOf("a", "web")
	web.Admin = true
	web.DNSNames = []string{"web.a.svc"}
	out, err := s.Sync(ctx, o, []*entries.Entry{web}, nil)
	if err != nil {
		t.Fatal(err)
	}
	api.Remove(out.Registered[web.Key()])
	o.Grants = entries.Grants{}
	web2 := *web
	web2.Admin = false
	web2.DNSNames = []string{"web2.a.svc"}
	api.cut = true
	_, err = s.Sync(ctx, o, []*entries.Entry{&web2}, nil)
	if err == nil {
		t.Fatal("the failed pass reported no error")
	}
	if got := reasonOf(err); got != spifferegistration.ReasonSpireUnavailable {
		t.Errorf("SPIRE failed the update call as a whole (Unavailable), and the pass is reported %s, not %s as before "+
			"9c20d03: the grant trim sent after the failed call found the entry gone, and its ErrStale is wrapped "+
			"into the call's error (error: %v)", got, spifferegistration.ReasonSpireUnavailable, err)
	}
}
