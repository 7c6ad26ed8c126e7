package metricsauth_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/metricsauth"
)

// plane is the control plane of this package's tests: a real API server,
// whose TokenReview and SubjectAccessReview answer the filter.
var plane testapi.SharedPlane

func TestMain(m *testing.M) {
	code := m.Run()
	if err := plane.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the control plane:", err)
	}
	os.Exit(code)
}

// secret is what the guarded handler serves: the series a reader must not
// see without the grant.
const secret = "trustplane_spire_entries{name=\"tenant-a-payments\"} 1\n"

// countingTransport counts the review calls that reach the API server:
// TokenReviews (and the most in flight at once) and SubjectAccessReviews.
type countingTransport struct {
	base                        http.RoundTripper
	reviews, accessReviews      atomic.Int64
	reviewsInFlight, mostAtOnce atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
		c.accessReviews.Add(1)
	case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
		c.reviews.Add(1)
		n := c.reviewsInFlight.Add(1)
		defer c.reviewsInFlight.Add(-1)
		for {
			most := c.mostAtOnce.Load()
			if n <= most || c.mostAtOnce.CompareAndSwap(most, n) {
				break
			}
		}
	}
	return c.base.RoundTrip(r)
}

// all sends a request with each token to url at once and returns the
// statuses (0 for a request that got no answer).
func all(url string, tokens []string) []int {
	statuses := make(chan int, len(tokens))
	for _, token := range tokens {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
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
	out := make([]int, 0, len(tokens))
	for range tokens {
		out = append(out, <-statuses)
	}
	return out
}

// guarded serves secret behind the filter that Provider(o) builds over cfg,
// and returns the server's URL, a count of the requests that reached the
// handler and the count of token reviews sent to the API server.
func guarded(t *testing.T, cfg *rest.Config, o metricsauth.Options) (string, *atomic.Int64, *countingTransport) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingTransport{base: hc.Transport}
	hc.Transport = counting
	filter, err := metricsauth.Provider(o)(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	served := &atomic.Int64{}
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, secret)
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, served, counting
}

// get sends GET url with the Authorization header auth (none when empty)
// and returns the status and body.
func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// accountToken returns a token the API server issues for the service
// account namespace/name, made if need be.
func accountToken(t *testing.T, namespace, name string) string {
	t.Helper()
	token, err := plane.Plane(t).ServiceAccountToken(context.Background(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// grantMetrics binds namespace/name to a ClusterRole that may get /metrics
// and returns the binding.
func grantMetrics(t *testing.T, c client.Client, namespace, name string) *rbacv1.ClusterRoleBinding {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + namespace},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + namespace + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	return binding
}

// TestATenantsServiceAccountReadsNoMetrics is the attack: a pod of a tenant
// (a service account token the API server accepts, with no grant) and
// anyone without a token asked the metrics endpoint for every binding's
// name and state. Each gets refused and the handler is never reached.
func TestATenantsServiceAccountReadsNoMetrics(t *testing.T) {
	_, ns := plane.For(t, "tenant-")
	cfg := plane.Plane(t).Config
	url, served, _ := guarded(t, cfg, metricsauth.Options{})
	token := accountToken(t, ns, "default-app")
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"basic credentials", "Basic YWRtaW46YWRtaW4=", http.StatusUnauthorized},
		{"an empty bearer", "Bearer ", http.StatusUnauthorized},
		{"a made-up token", "Bearer not-a-token", http.StatusUnauthorized},
		{"a tenant's service account", "Bearer " + token, http.StatusForbidden},
		{"the same, scheme in lower case", "bearer " + token, http.StatusForbidden},
	} {
		status, body := get(t, url+"/metrics", tc.auth)
		if status != tc.want || strings.Contains(body, "trustplane_") {
			t.Errorf("%s: got %d %q, want %d and no series", tc.name, status, body, tc.want)
		}
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the metrics handler served %d refused requests", n)
	}
}

// TestAReaderBoundToTheRoleReadsTheMetricsAndNothingElse proves the grant
// Prometheus gets (get on the non-resource URL /metrics) reads the metrics,
// and only the path it names.
func TestAReaderBoundToTheRoleReadsTheMetricsAndNothingElse(t *testing.T) {
	c, ns := plane.For(t, "reader-")
	cfg := plane.Plane(t).Config
	// A refusal is kept briefly, so that polling sees the new binding.
	url, served, _ := guarded(t, cfg, metricsauth.Options{DenyFor: 50 * time.Millisecond})
	token := accountToken(t, ns, "prometheus")
	grantMetrics(t, c, ns, "prometheus")
	g := gomega.NewWithT(t)
	// RBAC's authorizer sees a new binding within a moment.
	g.Eventually(func() string {
		status, body := get(t, url+"/metrics", "Bearer "+token)
		return fmt.Sprint(status, " ", body)
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.Equal("200 " + secret))
	if status, body := get(t, url+"/debug/pprof/heap", "Bearer "+token); status != http.StatusForbidden || body == secret {
		t.Errorf("a path the grant does not name: got %d %q, want 403", status, body)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the handler served %d requests, want only the allowed one", n)
	}
}

// TestAWithdrawnGrantEndsWithinAllowForAndDecisionsAreKept proves a reader
// costs the API server one review per AllowFor, not one per scrape, and
// that deleting its binding ends its access when the decision expires.
func TestAWithdrawnGrantEndsWithinAllowForAndDecisionsAreKept(t *testing.T) {
	c, ns := plane.For(t, "revoke-")
	cfg := plane.Plane(t).Config
	url, _, counting := guarded(t, cfg, metricsauth.Options{AllowFor: 2 * time.Second, DenyFor: 200 * time.Millisecond})
	token := accountToken(t, ns, "prometheus")
	binding := grantMetrics(t, c, ns, "prometheus")
	g := gomega.NewWithT(t)
	g.Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+token)
		return status
	}, 10*time.Second, 300*time.Millisecond).Should(gomega.Equal(http.StatusOK))
	before := counting.reviews.Load()
	for range 20 {
		if status, _ := get(t, url+"/metrics", "Bearer "+token); status != http.StatusOK {
			t.Fatalf("a kept decision: got %d, want 200", status)
		}
	}
	// The 20 scrapes take far less than AllowFor; at most one expiry falls
	// among them.
	if n := counting.reviews.Load() - before; n > 1 {
		t.Errorf("20 scrapes with one token sent %d token reviews, want at most 1", n)
	}
	if err := c.Delete(context.Background(), binding); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+token)
		return status
	}, 15*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusForbidden))
}

// TestAnAPIServerThatCannotBeReachedLetsNothingThrough proves the filter
// fails closed: when no review can be made, the request gets 503 and the
// handler is never reached.
func TestAnAPIServerThatCannotBeReachedLetsNothingThrough(t *testing.T) {
	cfg := rest.CopyConfig(plane.Plane(t).Config)
	l := httptest.NewServer(http.NotFoundHandler())
	cfg.Host = l.URL // an HTTP server that is no API server: every review fails
	l.Close()
	url, served, _ := guarded(t, cfg, metricsauth.Options{ReviewTimeout: 2 * time.Second})
	status, body := get(t, url+"/metrics", "Bearer some-token")
	if status != http.StatusServiceUnavailable || strings.Contains(body, "trustplane_") {
		t.Errorf("got %d %q, want 503 and no series", status, body)
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the handler served %d requests without a review", n)
	}
}

// TestAFloodOfMadeUpTokensReachesTheAPIServerSlowly proves what a client
// sending made-up tokens as fast as it can costs the API server: at most
// MaxConcurrentReviews reviews in flight, and no more than ReviewBurst plus
// ReviewQPS a second; every such request is refused.
func TestAFloodOfMadeUpTokensReachesTheAPIServerSlowly(t *testing.T) {
	// Every request waits its turn.
	url, _, counting := guarded(t, plane.Plane(t).Config, metricsauth.Options{MaxWaitingReviews: 64})
	const flood = 30
	tokens := make([]string, flood)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("made-up-%d", i)
	}
	start := time.Now()
	for _, s := range all(url+"/metrics", tokens) {
		if s != http.StatusUnauthorized {
			t.Errorf("a made-up token got %d, want 401", s)
		}
	}
	elapsed := time.Since(start)
	if m := counting.mostAtOnce.Load(); m > 4 {
		t.Errorf("%d token reviews were in flight at once, want at most 4", m)
	}
	// The limiter's bucket starts full (10) and refills 5 a second.
	if sent, most := counting.reviews.Load(), int64(10+5*elapsed.Seconds())+1; sent != flood || sent > most {
		t.Errorf("%d token reviews in %v, want %d, at most %d at 5 a second after a burst of 10", sent, elapsed, flood, most)
	}
	if elapsed < 3*time.Second {
		t.Errorf("%d reviews took %v: the rate limit of 5 a second after a burst of 10 did not hold", flood, elapsed)
	}
}
