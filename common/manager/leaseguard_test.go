package manager

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLeaseGuardRefusesWritesOfAStaleLeader proves the guard against a
// replica that wakes up after its lease passed on: its writes never reach
// the API server, its reads and lease renewals do, and a write is allowed
// only within RenewDeadline of a successful renewal.
func TestLeaseGuardRefusesWritesOfAStaleLeader(t *testing.T) {
	var (
		mu       sync.Mutex
		received []string
		leaseOK  = true
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		received = append(received, r.Method+" "+r.URL.Path)
		if strings.Contains(r.URL.Path, "/leases") && !leaseOK {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer srv.Close()
	now := time.Now()
	g := NewLeaseGuard("op.trustplane.dev")
	g.now = func() time.Time { return now }
	c := &http.Client{Transport: g.Wrap(http.DefaultTransport)}
	do := func(method, path string) error {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	const (
		lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/op.trustplane.dev"
		write = "/api/v1/namespaces/ns/configmaps/x"
	)
	if err := do(http.MethodPatch, write); err == nil || !strings.Contains(err.Error(), "never acquired") {
		t.Errorf("a write before the lease was acquired: %v", err)
	}
	if err := do(http.MethodPut, lease); err != nil {
		t.Fatalf("lease renewal: %v", err)
	}
	if err := do(http.MethodPatch, write); err != nil {
		t.Errorf("a write of the leader: %v", err)
	}
	// Paused for longer than the lease: reads go on, writes are refused.
	now = now.Add(RenewDeadline + time.Millisecond)
	if err := do(http.MethodGet, write); err != nil {
		t.Errorf("a read: %v", err)
	}
	for _, m := range []string{http.MethodPatch, http.MethodPut, http.MethodPost, http.MethodDelete} {
		if err := do(m, write); err == nil || !strings.Contains(err.Error(), "last renewed") {
			t.Errorf("%s after the renew deadline: %v", m, err)
		}
	}
	// A failed renewal (another replica holds the lease) renews nothing.
	mu.Lock()
	leaseOK = false
	mu.Unlock()
	if err := do(http.MethodPut, lease); err != nil {
		t.Fatal(err)
	}
	if err := do(http.MethodPatch, write); err == nil {
		t.Error("a write after a failed renewal")
	}
	// Another object named like a lease is no renewal.
	mu.Lock()
	leaseOK = true
	mu.Unlock()
	if err := do(http.MethodPut, "/api/v1/namespaces/ns/configmaps/leases"); err == nil {
		t.Error("a ConfigMap write counted as a lease renewal")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"PUT " + lease, "PATCH " + write, "GET " + write, "PUT " + lease}
	if strings.Join(received, ",") != strings.Join(want, ",") {
		t.Errorf("the API server received %q, want %q", received, want)
	}
}
