package metricsauth_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/common/metricsauth"
)

// reviewCallsTransport counts every review call (TokenReview and
// SubjectAccessReview) that reaches the API server.
type reviewCallsTransport struct {
	base                 http.RoundTripper
	tokenCalls, sarCalls atomic.Int64
}

func (c *reviewCallsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
		c.tokenCalls.Add(1)
	case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
		c.sarCalls.Add(1)
	}
	return c.base.RoundTrip(r)
}

// TestATenantsOwnTokensKeepToTheDocumentedReviewRate is an attack by a
// tenant that may get tokens for its own service account: each new token it
// sends is one the API server accepts, so each costs a TokenReview and a
// SubjectAccessReview. The review rate is documented for both together
// (a burst of 10, then 5 a second); before, the two review clients each
// had a token bucket of their own, and the API server received twice that.
func TestATenantsOwnTokensKeepToTheDocumentedReviewRate(t *testing.T) {
	_, ns := plane.For(t, "rate-")
	cfg := plane.Plane(t).Config
	const flood = 30
	tokens := make([]string, flood)
	for i := range tokens {
		tokens[i] = accountToken(t, ns, "app") // a TokenRequest each: a new token
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counting := &reviewCallsTransport{base: hc.Transport}
	hc.Transport = counting
	filter, err := metricsauth.Provider(metricsauth.Options{MaxWaitingReviews: 64})(cfg, hc) // every request waits its turn
	if err != nil {
		t.Fatal(err)
	}
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, secret) }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	start := time.Now()
	statuses := make(chan int, flood)
	for _, token := range tokens {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range flood {
		if s := <-statuses; s != http.StatusForbidden {
			t.Errorf("a tenant's token got %d, want 403", s)
		}
	}
	elapsed := time.Since(start)
	calls := counting.tokenCalls.Load() + counting.sarCalls.Load()
	most := int64(10+5*elapsed.Seconds()) + 1 // burst 10, then 5 a second
	if calls > most {
		t.Errorf("a tenant sending %d of its own tokens made the guard send %d review calls (%d TokenReviews, %d SubjectAccessReviews) in %v: "+
			"%.1f a second, more than the documented burst of 10 and 5 a second (at most %d)",
			flood, calls, counting.tokenCalls.Load(), counting.sarCalls.Load(), elapsed.Round(time.Millisecond),
			float64(calls)/elapsed.Seconds(), most)
	}
}
