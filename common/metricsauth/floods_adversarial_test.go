package metricsauth_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/metricsauth"
)

// floodStats counts what a flood sent and what it got back.
type floodStats struct {
	sent, tooMany, ok, answered atomic.Int64
}

// flood keeps connections requests to url in flight, each with the
// bearer token tokenFor(i) for the i-th request (a request answered 429
// is sent again with the same token when again is set), until the test
// ends or the returned stop is called.
func flood(t *testing.T, url string, connections int, again bool, tokenFor func(i int64) string) (*floodStats, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		stats floodStats
		next  atomic.Int64
		once  sync.Once
		hc    = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: connections}}
	)
	for range connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := next.Add(1) - 1
			for ctx.Err() == nil {
				token := tokenFor(i)
				if token == "" {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				stats.sent.Add(1)
				resp, err := hc.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				stats.answered.Add(1)
				switch resp.StatusCode {
				case http.StatusTooManyRequests:
					stats.tooMany.Add(1)
					if again {
						continue
					}
				case http.StatusOK:
					stats.ok.Add(1)
				}
				i = next.Add(1) - 1
			}
		}()
	}
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return &stats, stop
}

// scrapes sends n scrapes with token to url, as Prometheus does with its
// default 10 s scrape timeout, and returns what each got (status and time,
// or the error), stopping at the first 200; ok says whether one got 200.
func scrapes(url, token string, n int) (results []string, ok bool) {
	prometheus := &http.Client{Timeout: 10 * time.Second}
	for range n {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := prometheus.Do(req)
		if err != nil {
			results = append(results, fmt.Sprintf("no answer after %v (%v)", time.Since(start).Round(time.Second), err))
			continue
		}
		resp.Body.Close()
		results = append(results, fmt.Sprintf("%d after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond)))
		if resp.StatusCode == http.StatusOK {
			return results, true
		}
	}
	return results, false
}

// readerUnderGuard starts a guard whose grants expire at once (so that
// each scrape needs a review, as every other scrape does at a 30 s interval
// with the default minute), makes a reader of namespace's service account
// prometheus and has the guard allow its token once; it returns the
// guard's URL, the namespace's client and the reader's token.
func readerUnderGuard(t *testing.T, prefix string) (url string, c client.Client, ns, token string) {
	t.Helper()
	c, ns = plane.For(t, prefix)
	url, _, _ = guarded(t, plane.Plane(t).Config, metricsauth.Options{AllowFor: time.Millisecond, DenyFor: 50 * time.Millisecond})
	token = accountToken(t, ns, "prometheus")
	grantMetrics(t, c, ns, "prometheus")
	gomega.NewWithT(t).Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+token)
		return status
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusOK))
	return url, c, ns, token
}

// underWay waits until a flood has had its first answers for every
// connection.
func underWay(t *testing.T, stats *floodStats, connections int) {
	t.Helper()
	gomega.NewWithT(t).Eventually(stats.answered.Load, 30*time.Second, 20*time.Millisecond).
		Should(gomega.BeNumerically(">=", connections/2))
}

// madeUp is the i-th made-up token of a client without credentials.
func madeUp(i int64) string { return fmt.Sprintf("made-up-%d", i) }

// TestAFloodWithoutCredentialsDoesNotStarveAReaderItAllowedBefore is an
// attack by a client that holds no credential at all, only a route to the
// metrics port: 100 connections, each sending a new made-up token as soon
// as its last request is answered. Before, every request that needed a
// review waited for a turn in arrival order, and the turns came at the
// review rate (5 a second), so Prometheus's scrape, once its grant had
// expired, waited behind about 20 s of made-up tokens, past its 10 s
// scrape timeout: it read nothing for as long as the flood lasted. Now a
// reader is reviewed in a lane of its own, and a lane's waiting room is
// bounded (the flood's extra requests get 429 at once).
func TestAFloodWithoutCredentialsDoesNotStarveAReaderItAllowedBefore(t *testing.T) {
	url, _, _, reader := readerUnderGuard(t, "starve-")
	stats, stop := flood(t, url, 100, false, madeUp)
	underWay(t, stats, 100)
	results, ok := scrapes(url, reader, 2)
	stop()
	if stats.tooMany.Load() == 0 {
		t.Errorf("%d requests with made-up tokens, 100 at a time, and none found the waiting room full (429)", stats.sent.Load())
	}
	if !ok || len(results) != 1 {
		t.Errorf("a client with no credential (%d made-up tokens, %d answered 429) kept a reader the guard allowed before "+
			"from reading the metrics: %v", stats.sent.Load(), stats.tooMany.Load(), results)
	}
}

// TestAFloodWithoutCredentialsDoesNotStarveAReaderWhoseTokenWasRotated: the
// same flood, after the kubelet replaced the reader's projected token (it
// does so about hourly, and Prometheus reads the file anew for each
// scrape). With a lane keyed by the token, the same reader with the same
// grant came back with a token the guard had never allowed and got 429 on
// every scrape. The reader's lane now follows its user, told for a new
// service account token by the API server's signature on it.
func TestAFloodWithoutCredentialsDoesNotStarveAReaderWhoseTokenWasRotated(t *testing.T) {
	url, _, ns, _ := readerUnderGuard(t, "rotate-")
	rotated := accountToken(t, ns, "prometheus")
	stats, stop := flood(t, url, 100, false, madeUp)
	underWay(t, stats, 100)
	results, ok := scrapes(url, rotated, 2)
	stop()
	if !ok || len(results) != 1 {
		t.Errorf("a client with no credential (%d made-up tokens, %d answered 429) kept Prometheus out after its token was rotated: %v",
			stats.sent.Load(), stats.tooMany.Load(), results)
	}
}

// TestAFloodOfForgedReaderTokensDoesNotStarveTheReader: the flood's tokens
// claim to be the reader's, with the API server's key ID and a signature
// of their own making. Were a claim enough to enter the readers' lane,
// they would fill it; a token enters it only under the API server's
// signature.
func TestAFloodOfForgedReaderTokensDoesNotStarveTheReader(t *testing.T) {
	url, _, ns, reader := readerUnderGuard(t, "forged-")
	header := strings.Split(reader, ".")[0] // the API server's algorithm and key ID
	sub := "system:serviceaccount:" + ns + ":prometheus"
	forged := func(i int64) string {
		claims := fmt.Sprintf(`{"sub":%q,"exp":%d,"jti":"%d"}`, sub, time.Now().Add(time.Hour).Unix(), i)
		sig := base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat(fmt.Sprint(i), 256)[:256]))
		return header + "." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + "." + sig
	}
	rotated := accountToken(t, ns, "prometheus")
	stats, stop := flood(t, url, 100, false, forged)
	underWay(t, stats, 100)
	results, ok := scrapes(url, rotated, 2)
	stop()
	if stats.ok.Load() != 0 {
		t.Errorf("%d forged tokens read the metrics", stats.ok.Load())
	}
	if !ok || len(results) != 1 {
		t.Errorf("tokens forged to claim the reader's account (%d sent, %d answered 429) kept the reader out: %v",
			stats.sent.Load(), stats.tooMany.Load(), results)
	}
}

// TestAWithdrawnReadersTokensDoNotFloodTheReadersLane is an attack by a
// tenant whose service account once held the metrics grant. While it held
// it, it minted tokens for its own account (a TokenRequest, which a tenant
// may make) and had each allowed once; then the grant was withdrawn. A
// lane keyed by the tokens the guard had allowed kept every one of them
// "allowed before", so the tenant, without any grant, filled the readers'
// lane with them and Prometheus's scrapes got 429. Now a user leaves the
// readers' lane at the first review that refuses it.
func TestAWithdrawnReadersTokensDoNotFloodTheReadersLane(t *testing.T) {
	url, c, ns, reader := readerUnderGuard(t, "withdrawn-")
	const minted = 40
	tenant := make([]string, minted)
	for i := range tenant {
		tenant[i] = accountToken(t, ns, "tenant-monitoring")
	}
	binding := grantMetricsTo(t, c, ns, "tenant-monitoring")
	g := gomega.NewWithT(t)
	g.Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+tenant[0])
		return status
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusOK))
	for _, token := range tenant[1:] {
		if status, _ := get(t, url+"/metrics", "Bearer "+token); status != http.StatusOK {
			t.Fatalf("a minted token of the granted tenant got %d, want 200", status)
		}
	}
	if err := c.Delete(context.Background(), binding); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+accountToken(t, ns, "tenant-monitoring"))
		return status
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusForbidden))

	// Twenty requests with the formerly allowed tokens in flight; a token
	// answered 429 is sent again.
	stats, stop := flood(t, url, 20, true, func(i int64) string {
		if i >= minted {
			return ""
		}
		return tenant[i]
	})
	underWay(t, stats, 20)
	results, ok := scrapes(url, reader, 3)
	stop()
	if stats.ok.Load() != 0 {
		t.Errorf("%d withdrawn tokens read the metrics", stats.ok.Load())
	}
	if !ok {
		t.Errorf("a tenant whose grant was withdrawn, with %d tokens the guard allowed while it lasted, kept Prometheus out: %v",
			minted, results)
	}
}

// grantMetricsTo binds namespace/name to the ClusterRole grantMetrics made
// for namespace, and returns the binding.
func grantMetricsTo(t *testing.T, c client.Client, namespace, name string) *rbacv1.ClusterRoleBinding {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + namespace + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader-" + namespace},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if err := c.Create(context.Background(), binding); err != nil {
		t.Fatal(err)
	}
	return binding
}
