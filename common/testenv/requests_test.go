package testenv_test

import (
	"net/http"
	"net/http/httptest"
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
