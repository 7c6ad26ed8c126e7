package entrysync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestATakeoverProbeRefusalIsReportedAsARefusalNotTransient: the older
// object wants exactly the entry a younger object holds (no update probe),
// and SPIRE refuses that entry (InvalidArgument: a permanent refusal). The
// create probe gets InvalidArgument per item; aee2442 drops the takeover
// and fails the pass with ErrTransient ("a cause that may pass",
// SpireFailedEntries), and the wanted entry is in neither Registered,
// Masked nor Failed. The same refusal on the update probe, or on a plain
// create, lands in out.Failed (EntryRejected, the status names it). Here the
// user is told to wait for a datastore blip that never passes.
func TestATakeoverProbeRefusalIsReportedAsARefusalNotTransient(t *testing.T) {
	api := fake.New()
	e := named("/shared", "a", "sa", "app", "web")
	s, older, held := sharedByYounger(t, api, e)
	api.Reject[e.SpiffeID.String()] = true
	ctx := context.Background()

	// The same refusal for an entry with no takeover, for comparison.
	plain := named("/plain", "a", "sa2", "app", "p")
	api.Reject[plain.SpiffeID.String()] = true
	pOut, pErr := s.Sync(ctx, owner("plain", 2*time.Hour), ptrs([]entries.Entry{plain}), nil)

	out, err := s.Sync(ctx, older, ptrs([]entries.Entry{e}), nil)
	if api.Get(held) == nil {
		t.Fatalf("setup: the holder's entry was deleted")
	}
	var reported bool
	for _, f := range out.Failed {
		if f.Entry.Key() == e.Key() {
			reported = true
		}
	}
	masked := len(out.Masked) > 0
	if !reported && !masked || errors.Is(err, ErrTransient) && !errors.Is(pErr, ErrTransient) {
		t.Errorf("SPIRE refuses the older object's wanted entry for good (InvalidArgument on the takeover's create probe of the "+
			"identical held entry); the pass reports it as transient (errors.Is ErrTransient: %v -> SpireFailedEntries, retried "+
			"with backoff forever) and the entry is in neither Failed nor Masked (failed %+v, masked %+v, err %v); the same "+
			"refusal with no takeover is reported as a refusal (failed %+v, err %v). New in aee2442 (aee2442^ went on "+
			"and the refused create landed in Failed)", errors.Is(err, ErrTransient), out.Failed, out.Masked, err, pOut.Failed, pErr)
	}
}
