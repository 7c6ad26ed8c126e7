package metricsauth_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/metricsauth"
)

// TestATenantsOwnTokensKeepToTheDocumentedReviewRate is an attack by a
// tenant that may get tokens for its own service account: each new token it
// sends is one the API server accepts, so each costs a TokenReview and a
// SubjectAccessReview. The review rate is documented for both together
// (a burst of 10, then 5 a second); before, the two review clients each
// had a token bucket of their own, and the API server received twice that.
func TestATenantsOwnTokensKeepToTheDocumentedReviewRate(t *testing.T) {
	_, ns := plane.For(t, "rate-")
	// Every request waits its turn.
	url, _, counting := guarded(t, plane.Plane(t).Config, metricsauth.Options{MaxWaitingReviews: 64})
	const flood = 30
	tokens := make([]string, flood)
	for i := range tokens {
		tokens[i] = accountToken(t, ns, "app") // a TokenRequest each: a new token
	}
	start := time.Now()
	for _, s := range all(url+"/metrics", tokens) {
		if s != http.StatusForbidden {
			t.Errorf("a tenant's token got %d, want 403", s)
		}
	}
	elapsed := time.Since(start)
	calls := counting.reviews.Load() + counting.accessReviews.Load()
	most := int64(10+5*elapsed.Seconds()) + 1 // burst 10, then 5 a second
	if calls > most {
		t.Errorf("a tenant sending %d of its own tokens made the guard send %d review calls (%d TokenReviews, %d SubjectAccessReviews) in %v: "+
			"%.1f a second, more than the documented burst of 10 and 5 a second (at most %d)",
			flood, calls, counting.reviews.Load(), counting.accessReviews.Load(), elapsed.Round(time.Millisecond),
			float64(calls)/elapsed.Seconds(), most)
	}
}
