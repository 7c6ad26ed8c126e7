package entrysync

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// ReasonFederatedBundleMissing is the Failed.Reason of an entry SPIRE
// refused because it holds no bundle of a trust domain the entry federates
// with. SPIRE answers it with the code Internal, which alone would count as
// transient; it lasts until SPIRE has the bundle.
const ReasonFederatedBundleMissing = "FederatedBundleMissing"

// missingBundleText is how SPIRE's SQL datastore words the refusal.
const missingBundleText = "unable to find federated bundle"

// refusal returns the lasting failure of e that the per-entry result r
// reports, when it is one SPIRE words as Internal; ok is false otherwise.
func refusal(e *entries.Entry, r spire.Result) (f Failed, ok bool) {
	if r.Code != codes.Internal || !strings.Contains(r.Message, missingBundleText) {
		return Failed{}, false
	}
	return Failed{Entry: *e, Reason: ReasonFederatedBundleMissing, Message: fmt.Sprintf(
		"SPIRE has no bundle of a trust domain in federatesWith %v: apply a SpiffeFederation for it, with a trustDomainBundle "+
			"or until SPIRE has fetched the bundle from its endpoint (SPIRE: %s)", e.FederatesWith, r.Message)}, true
}

// isRefusal records in out (unless nil) the lasting failure that r reports
// for e, and reports whether it did.
func isRefusal(e *entries.Entry, r spire.Result, out *Outcome) bool {
	f, ok := refusal(e, r)
	if ok && out != nil {
		out.Failed = append(out.Failed, f)
	}
	return ok
}
