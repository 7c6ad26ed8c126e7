package spiffeentry

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestASpiffeEntryWithMoreSelectorsThanAnEntryMayHaveIsRefusedBeforeSPIRE:
// a SpiffeEntry stored under an older or edited CRD (one without
// maxItems: 64 on spec.selectors) carries 600 selectors. SPIRE 1.13.3 on
// SQLite answers such a create with code Internal ("datastore-sql: too many
// terms in compound SELECT", checked against the real spire-server), which
// the operator must take for SPIRE failing: the object reports
// SpireFailedEntries and is retried with backoff forever, blaming SPIRE for
// its own spec. The operator already holds rendered entries to
// entries.MaxSelectors (TooManySelectors) and a SpiffeEntry to the other
// limits of rendered entries whatever its CRD admitted; the selector count
// must be one of them: refused with InvalidSelector naming spec.selectors,
// without a call to SPIRE (seen failing: reason SpireFailedEntries, one
// BatchCreateEntry call).
func TestASpiffeEntryWithMoreSelectorsThanAnEntryMayHaveIsRefusedBeforeSPIRE(t *testing.T) {
	h, api := newHandler()
	obj := newEntry("a", 0)
	obj.Spec.Selectors = nil
	for i := range 600 {
		obj.Spec.Selectors = append(obj.Spec.Selectors, fmt.Sprintf("x509pop:subject:cn:db-%d", i))
	}
	// What SPIRE's SQLite datastore answers for this entry.
	api.Fail[obj.Spec.SpiffeID] = codes.Internal

	err := h.CreateOrUpdate(context.Background(), obj)
	if got := ctrlerrors.Reason(err, ""); got != ReasonInvalidSelector || !ctrlerrors.IsBlocked(err) ||
		!strings.Contains(err.Error(), "spec.selectors") {
		t.Errorf("a SpiffeEntry of %d selectors (over the %d an entry may have): reason %q, blocked %v, err %v; "+
			"want a Blocked %s naming spec.selectors", len(obj.Spec.Selectors), entries.MaxSelectors, got, ctrlerrors.IsBlocked(err), err, ReasonInvalidSelector)
	}
	if n := api.Calls["BatchCreateEntry"]; n != 0 {
		t.Errorf("the entry reached SPIRE (%d BatchCreateEntry calls): it should be refused before", n)
	}
}
