package metricsauth

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// TestATokenOfDotsCostsTheGuardNoMoreThanAMadeUpOneOfItsSize is an attack
// by a client without any credential: a bearer token of 16 KiB (the
// largest the issuer check parses) made of dots alone. The issuer check
// splits it at every dot before it sees it is no JSON Web Token, about
// 16,000 strings and a quarter megabyte allocated per request, and it
// does so before the lane's waiting room is asked, so a full lane (429)
// bounds none of it. The test compares the guard's own work per request
// for that token with a made-up token of the same size, every request
// answered 429 from a full lane: the attacker sends the same bytes either
// way. (It took 8 to 16 times as long, and a quarter megabyte more.)
func TestATokenOfDotsCostsTheGuardNoMoreThanAMadeUpOneOfItsSize(t *testing.T) {
	o := Options{}.withDefaults()
	full := func() *lane {
		l := &lane{turns: make(chan struct{}, o.MaxConcurrentReviews)}
		l.waiting.Store(int64(o.MaxWaitingReviews)) // every request gets 429
		return l
	}
	g := &guard{known: full(), unknown: full(), opts: o, now: time.Now,
		decided: map[[sha256.Size]byte]decision{}, readers: map[string]bool{}}
	g.issuer = &issuerKeys{now: time.Now, refetchAfter: time.Minute, fetch: func(context.Context) ([]byte, error) {
		return []byte(`{"keys":[]}`), nil
	}}
	h, err := g.filter(logr.Discard(), http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	// Bytes allocated per request: a count the machine's load does not
	// move, unlike time.
	perRequest := func(token string) uint64 {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		const n = 200
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("got %d, want 429 from a full lane", w.Code)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	madeUp := perRequest(strings.Repeat("m", maxTokenLen))
	dots := perRequest(strings.Repeat(".", maxTokenLen))
	if dots > 2*madeUp+4096 {
		t.Errorf("a client without credentials made the guard allocate %d bytes per request with a 16 KiB token of dots, "+
			"against %d with a made-up token of the same size, before any lane bound it (every request answered 429)",
			dots, madeUp)
	}
}
