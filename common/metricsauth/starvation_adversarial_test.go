package metricsauth_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/trustplane/trustplane/common/metricsauth"
)

// TestAFloodWithoutCredentialsDoesNotStarveAReaderItAllowedBefore is an
// attack by a client that holds no credential at all, only a route to the
// metrics port: 100 connections, each sending a new made-up token as soon
// as its last request is answered. Before, every request that needed a
// review waited for a turn in arrival order, and the turns came at the
// review rate (5 a second), so Prometheus's scrape, once its grant had
// expired, waited behind about 20 s of made-up tokens, past its 10 s scrape
// timeout: it read nothing for as long as the flood lasted. Now a token
// the guard allowed before is reviewed in a lane of its own, and a lane's
// waiting room is bounded (the flood's extra requests get 429 at once).
func TestAFloodWithoutCredentialsDoesNotStarveAReaderItAllowedBefore(t *testing.T) {
	c, ns := plane.For(t, "starve-")
	cfg := plane.Plane(t).Config
	// Grants expire at once, so that each scrape needs a review, as every
	// other scrape does at a 30 s interval with the default minute.
	url, served, _ := guarded(t, cfg, metricsauth.Options{AllowFor: time.Millisecond, DenyFor: 50 * time.Millisecond})
	reader := accountToken(t, ns, "prometheus")
	grantMetrics(t, c, ns, "prometheus")
	g := gomega.NewWithT(t)
	g.Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+reader)
		return status
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusOK))

	ctx, stop := context.WithCancel(context.Background())
	var (
		wg            sync.WaitGroup
		sent, tooMany atomic.Int64
		attacker      = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
		stopped       bool
		stopAttack    = func() {
			if !stopped {
				stopped = true
				stop()
				wg.Wait()
			}
		}
	)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
				req.Header.Set("Authorization", fmt.Sprintf("Bearer made-up-%d", sent.Add(1)))
				if resp, err := attacker.Do(req); err == nil {
					if resp.StatusCode == http.StatusTooManyRequests {
						tooMany.Add(1)
					}
					resp.Body.Close()
				}
			}
		}()
	}
	t.Cleanup(stopAttack)
	// The flood is under way: every connection has sent, and half of them
	// have had an answer.
	g.Eventually(sent.Load, 30*time.Second, 50*time.Millisecond).Should(gomega.BeNumerically(">=", 150))

	prometheus := &http.Client{Timeout: 10 * time.Second}
	var results []string
	for range 2 {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+reader)
		resp, err := prometheus.Do(req)
		if err != nil {
			results = append(results, fmt.Sprintf("no answer after %v (%v)", time.Since(start).Round(time.Second), err))
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			results = append(results, fmt.Sprintf("%d after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond)))
		}
	}
	stopAttack()
	if tooMany.Load() == 0 {
		t.Errorf("%d requests with made-up tokens, 100 at a time, and none found the waiting room full (429)", sent.Load())
	}
	if len(results) > 0 {
		t.Errorf("a client with no credential, keeping 100 requests with made-up tokens in flight (%d sent, %d answered 429), "+
			"kept a reader the guard allowed before from reading the metrics: %v; the handler served %d requests",
			sent.Load(), tooMany.Load(), results, served.Load())
	}
}
