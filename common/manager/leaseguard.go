package manager

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// RenewDeadline is how long a leader keeps leading without renewing its
// lease (controller-runtime's default, set explicitly so that LeaseGuard
// and the leader elector agree). Candidates take a lease only once it has
// not been renewed for its duration (15s), 5s later.
const RenewDeadline = 10 * time.Second

// LeaseGuard refuses the writes of a replica that may no longer hold its
// lease: every write (any request but GET, HEAD and OPTIONS) except to its
// own lease fails unless the replica renewed the lease within
// RenewDeadline, by the monotonic clock, which runs on while the process
// is stopped. The leader elector stops a leader that cannot renew only
// when it next runs; a process paused (SIGSTOP, a frozen VM, a long GC
// pause) for longer than the lease wakes up with its workers running and
// believes it still leads until the elector's renew fails, seconds later,
// while another replica already leads. The guard closes that window for
// the Kubernetes API, and Allow closes it for any other writer (SPIRE).
// Writes before the first renewal are refused too: a replica that never
// led never writes.
type LeaseGuard struct {
	// lease is the path suffix of the lease: leases/<name>.
	lease string
	now   func() time.Time

	mu      sync.Mutex
	renewed time.Time
}

// NewLeaseGuard guards the writes of the holder of the lease name.
func NewLeaseGuard(name string) *LeaseGuard {
	return &LeaseGuard{lease: "/leases/" + name, now: time.Now}
}

// Allow returns an error unless the lease was renewed within RenewDeadline.
func (g *LeaseGuard) Allow() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.renewed.IsZero() {
		return fmt.Errorf("not the leader: the leader election lease was never acquired")
	}
	if since := g.now().Sub(g.renewed); since > RenewDeadline {
		return fmt.Errorf("not the leader: the leader election lease was last renewed %s ago (renew deadline %s)",
			since.Round(time.Millisecond), RenewDeadline)
	}
	return nil
}

// Wrap guards the requests of rt (for rest.Config.Wrap).
func (g *LeaseGuard) Wrap(rt http.RoundTripper) http.RoundTripper {
	return guardedTransport{g: g, next: rt}
}

type guardedTransport struct {
	g    *LeaseGuard
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return t.next.RoundTrip(req)
	}
	path := req.URL.Path
	isLease := strings.Contains(path, "/apis/coordination.k8s.io/") &&
		(strings.HasSuffix(path, t.g.lease) || (req.Method == http.MethodPost && strings.HasSuffix(path, "/leases")))
	if !isLease {
		if err := t.g.Allow(); err != nil {
			return nil, fmt.Errorf("%s %s refused: %w", req.Method, path, err)
		}
		return t.next.RoundTrip(req)
	}
	// The lease counts as renewed from when the renewal was sent, which is
	// no later than when the API server stored it.
	sent := t.g.now()
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		t.g.mu.Lock()
		if sent.After(t.g.renewed) {
			t.g.renewed = sent
		}
		t.g.mu.Unlock()
	}
	return resp, err
}
