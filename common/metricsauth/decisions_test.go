package metricsauth

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAFloodOfMadeUpTokensKeepsTheDecisionsBounded proves the decisions
// kept never pass MaxDecisions, whatever number of tokens a client makes
// up, that the newest decision is always kept, and that the refusals make
// room before a reader's live grant, which a flood so never pushes out.
func TestAFloodOfMadeUpTokensKeepsTheDecisionsBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := &guard{
		opts:    Options{MaxDecisions: 8}.withDefaults(),
		now:     func() time.Time { return now },
		decided: map[[sha256.Size]byte]decision{},
		readers: map[string]bool{},
	}
	reader := sha256.Sum256([]byte("prometheus"))
	const prometheus = "system:serviceaccount:monitoring:prometheus"
	g.keep(reader, http.StatusOK, prometheus, readerKey(prometheus, "get", "/metrics")) // kept for AllowFor, 1 minute
	for i := range 1000 {
		if i%100 == 0 {
			now = now.Add(5 * time.Second) // some refusals expire, the grant does not
		}
		key := sha256.Sum256(fmt.Appendf(nil, "made-up-%d", i))
		// Every tenth made-up token is a tenant's real one, refused.
		user := ""
		if i%10 == 0 {
			user = fmt.Sprintf("system:serviceaccount:tenant:app-%d", i)
		}
		g.keep(key, http.StatusUnauthorized, user, readerKey(user, "get", "/metrics"))
		if n := len(g.readers); n > 8 {
			t.Fatalf("after %d tokens, %d users are remembered, more than MaxDecisions 8", i+1, n)
		}
		if !g.reader(readerKey(prometheus, "get", "/metrics")) {
			t.Fatalf("token %d pushed the reader out of the readers", i)
		}
		if n := len(g.decided); n > 8 {
			t.Fatalf("after %d tokens, %d decisions are kept, more than MaxDecisions 8", i+1, n)
		}
		if status, ok, _ := g.kept(key); !ok || status != http.StatusUnauthorized {
			t.Fatalf("token %d: the newest decision is not kept (%d, %v)", i, status, ok)
		}
		if status, ok, _ := g.kept(reader); !ok || status != http.StatusOK {
			t.Fatalf("token %d pushed the reader's live grant out (%d, %v)", i, status, ok)
		}
	}
}

// TestBearerTokenReadsOnlyABearerScheme checks the header parsing against
// what RFC 6750 allows: the scheme in any case, one token.
func TestBearerTokenReadsOnlyABearerScheme(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer abc":   "abc",
		"BEARER  abc ": "abc",
		"Bearer":       "",
		"Bearer ":      "",
		"Basic abc":    "",
		"abc":          "",
		"":             "",
	} {
		r, _ := http.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Authorization", header)
		got, ok := bearerToken(r)
		if got != want || ok != (want != "") {
			t.Errorf("%q: got %q, %v; want %q", header, got, ok, want)
		}
	}
}
