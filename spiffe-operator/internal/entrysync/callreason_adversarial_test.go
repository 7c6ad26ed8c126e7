package entrysync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
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

// cutCreates is a SPIRE behind a proxy whose BatchCreateEntry calls fail as
// a whole, answered as spire.Client answers a failed call. grpc-go gives a
// call a proxy answers with an HTTP error it does not map (500, 400) the
// code Unknown ("unexpected HTTP status code received from server: 500").
type cutCreates struct {
	*fake.EntryAPI
	code codes.Code
}

func (f *cutCreates) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	if f.code == codes.OK {
		return f.EntryAPI.Create(ctx, in)
	}
	err := status.Errorf(f.code, "BatchCreateEntry: call failed as a whole (fake proxy)")
	out := make([]spire.Result, len(in))
	for i := range out {
		out[i] = spire.Result{Code: f.code, Message: err.Error()}
	}
	return out, err
}

func reasonOf(err error) string {
	var r interface{ Reason() string }
	if errors.As(spifferegistration.SpireError(err), &r) {
		return r.Reason()
	}
	return "?"
}

func entryOf(ns, sa string) *entries.Entry {
	e := &entries.Entry{
		SpiffeID:  spiffeid.RequireFromString("spiffe://example.org/ns/" + ns + "/sa/" + sa),
		ParentID:  spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:" + ns}, {Type: "k8s", Value: "sa:" + sa}},
	}
	e.Normalize()
	return e
}

// TestACreateCallThatNeverReachedSpireIsNotReportedAsEntriesSpireFailed:
// the BatchCreateEntry call fails as a whole with Unknown (an HTTP error
// from a proxy in front of SPIRE; nothing reached SPIRE). Before 9c20d03
// the pass returned the call's error alone, reported SpireUnavailable.
// Now each entry gets the call's code, Unknown counts as transient, so
// the pass's error also wraps ErrTransient ("create 1 entries: ...
// ErrTransient"), and SpireError's "errors.Is(ErrTransient) &&
// status.Code == Unknown" case, meant for "every call was answered: SPIRE
// is there, and failed the entries the error names", reports
// SpireFailedEntries: the user is told SPIRE failed single entries and is
// sent to look at those entries, while SPIRE was never reached.
func TestACreateCallThatNeverReachedSpireIsNotReportedAsEntriesSpireFailed(t *testing.T) {
	ctx := context.Background()
	api := &cutCreates{EntryAPI: fake.New(), code: codes.Unknown}
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	o := entrysync.Owner{Kind: "SpiffeRegistration", Name: "p", UID: k8stypes.UID("p-0000-0000-0000-000000000000"), Created: time.Now()}
	_, err := s.Sync(ctx, o, []*entries.Entry{entryOf("a", "web")}, nil)
	if err == nil {
		t.Fatal("the failed create call reported no error")
	}
	if got := reasonOf(err); got == spifferegistration.ReasonSpireFailedEntries {
		t.Errorf("the create call failed as a whole and never reached SPIRE (%v), yet the reason is %s "+
			"(\"SPIRE answered, but failed single entries\"); before 9c20d03 it was %s",
			err, got, spifferegistration.ReasonSpireUnavailable)
	}
}

// TestACreateCallSpireFailsIsNotReportedAsSpireChanged: SPIRE fails the
// create call as a whole (Unavailable), and in the same pass an update
// finds its entry gone (deleted by hand since the view was read). Before
// 9c20d03 the pass ended at the failed create call, reported
// SpireUnavailable and retried with backoff. Now the updates run after it,
// the NotFound makes updateAll return ErrStale, and SpireError checks
// ErrStale first: the pass is reported SpireChanged ("SPIRE changed during
// the pass; retried at once"), hiding the outage (and skipping the
// backoff) behind a hand edit.
func TestACreateCallSpireFailsIsNotReportedAsSpireChanged(t *testing.T) {
	ctx := context.Background()
	api := &cutCreates{EntryAPI: fake.New()}
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	o := entrysync.Owner{Kind: "SpiffeRegistration", Name: "p", UID: k8stypes.UID("p-0000-0000-0000-000000000000"), Created: time.Now()}
	web := entryOf("a", "web")
	web.DNSNames = []string{"web.a.svc"}
	out, err := s.Sync(ctx, o, []*entries.Entry{web}, nil)
	if err != nil {
		t.Fatal(err)
	}
	api.Remove(out.Registered[web.Key()])
	web2 := *web
	web2.DNSNames = []string{"web2.a.svc"}
	api.code = codes.Unavailable
	_, err = s.Sync(ctx, o, []*entries.Entry{&web2, entryOf("b", "ops")}, nil)
	if err == nil {
		t.Fatal("the failed pass reported no error")
	}
	if got := reasonOf(err); got != spifferegistration.ReasonSpireUnavailable {
		t.Errorf("SPIRE failed the create call as a whole (Unavailable), and the pass is reported %s, not %s "+
			"as before 9c20d03 (error: %v)", got, spifferegistration.ReasonSpireUnavailable, err)
	}
}
