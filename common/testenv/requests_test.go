package testenv_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/common/testenv"
)

// TestObserveRequestsSeesEachRequestAndPassesItOn checks that the observer
// sees every request a client built from the config sends, before the
// server answers it, and that the request still reaches the server,
// through a wrapper the config had already (here, an earlier observer).
func TestObserveRequestsSeesEachRequestAndPassesItOn(t *testing.T) {
	var served, seen, seenBeforeServed, wrapped atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL}
	testenv.ObserveRequests(cfg, func(*http.Request) { wrapped.Add(1) })
	testenv.ObserveRequests(cfg, func(r *http.Request) {
		if seen.Add(1) > served.Load() {
			seenBeforeServed.Add(1)
		}
	})
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		resp, err := client.Get(srv.URL + "/apis")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot {
			t.Fatalf("status %d, want the server's %d", resp.StatusCode, http.StatusTeapot)
		}
	}
	if seen.Load() != 3 || served.Load() != 3 || wrapped.Load() != 3 {
		t.Fatalf("seen %d, served %d, through the earlier wrapper %d; want 3 each", seen.Load(), served.Load(), wrapped.Load())
	}
	if seenBeforeServed.Load() != 3 {
		t.Fatalf("%d of 3 requests seen before the server answered them", seenBeforeServed.Load())
	}
}

// TestTamperReviewsRewritesOnlyReviews checks each of TamperReviews's
// answers against a server that denies every review: as answered, the
// denial; allowed, the server asked and its answer turned; failed, a 500
// and the server not asked. Other requests pass untouched.
func TestTamperReviewsRewritesOnlyReviews(t *testing.T) {
	var reviews, others atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
			reviews.Add(1)
			_, _ = w.Write([]byte(`{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{},"status":{"allowed":false,"reason":"no"}}`))
			return
		}
		others.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	var next atomic.Int64
	cfg := &rest.Config{Host: srv.URL}
	testenv.TamperReviews(cfg, func() testenv.ReviewTamper { return testenv.ReviewTamper(next.Load()) })
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review := func() (int, string) {
		t.Helper()
		resp, err := client.Post(srv.URL+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		// A review's status holds "allowed"; a Status's is a word.
		allowed := fmt.Sprint(body["status"])
		if st, ok := body["status"].(map[string]any); ok {
			allowed = fmt.Sprint(st["allowed"])
		}
		return resp.StatusCode, allowed
	}
	for _, c := range []struct {
		tamper  testenv.ReviewTamper
		code    int
		allowed string
		asked   int64
	}{
		{testenv.ReviewAsAnswered, http.StatusOK, "false", 1},
		{testenv.ReviewAllowed, http.StatusOK, "true", 2},
		{testenv.ReviewFailed, http.StatusInternalServerError, "Failure", 2},
	} {
		next.Store(int64(c.tamper))
		code, allowed := review()
		if code != c.code || allowed != c.allowed || reviews.Load() != c.asked {
			t.Errorf("tamper %d: code %d, allowed %s, server asked %d times; want %d, %s, %d", c.tamper, code, allowed, reviews.Load(), c.code, c.allowed, c.asked)
		}
	}
	resp, err := client.Post(srv.URL+"/api/v1/namespaces/x/configmaps", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || others.Load() != 1 {
		t.Errorf("another request: code %d, served %d times; want the server's %d, once", resp.StatusCode, others.Load(), http.StatusTeapot)
	}
}
