package manager

import (
	"context"
	"fmt"
	"io"
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
	_, err := g.Deadline()
	return err
}

// Deadline returns when the replica's right to write ends: RenewDeadline
// after its last renewal, as an instant of the monotonic clock, so that a
// pause of the process after the call does not move it. A write allowed
// now must land before it, or a replica that took the lease meanwhile
// could see it land (candidates take the lease 5s after it at the
// earliest): a writer bounds the write by it. An error says the replica
// may not write at all.
func (g *LeaseGuard) Deadline() (time.Time, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.renewed.IsZero() {
		return time.Time{}, fmt.Errorf("not the leader: the leader election lease was never acquired")
	}
	if since := g.now().Sub(g.renewed); since >= RenewDeadline {
		return time.Time{}, fmt.Errorf("not the leader: the leader election lease was last renewed %s ago (renew deadline %s)",
			since.Round(time.Millisecond), RenewDeadline)
	}
	return g.renewed.Add(RenewDeadline), nil
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
		deadline, err := t.g.Deadline()
		if err != nil {
			return nil, fmt.Errorf("%s %s refused: %w", req.Method, path, err)
		}
		// The write must land while the lease is ours: it is cut off at
		// the renew deadline, whatever holds it up (a webhook, a stalled
		// server, a pause of this process).
		ctx, cancel := context.WithDeadline(req.Context(), deadline)
		resp, err := t.next.RoundTrip(req.WithContext(ctx))
		if err != nil {
			cancel()
			return nil, err
		}
		resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
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

// cancelOnClose releases a request's context once its response body is
// closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and cancels the request's context.
func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
