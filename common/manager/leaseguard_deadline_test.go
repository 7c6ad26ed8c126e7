package manager

import (
	"net/http"
	"testing"
	"time"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestLeaseGuardCutsAnAllowedWriteOffAtTheRenewDeadline: Allow was asked
// once, before the request left, and nothing bounded how long the allowed
// write could then take to land: one allowed 9.9s after the last renewal,
// held up (a slow admission webhook, a stalled API server, a pause of the
// process between Allow and the send), could land after the lease expired
// and another replica led. The write's context now ends at the renew
// deadline.
func TestLeaseGuardCutsAnAllowedWriteOffAtTheRenewDeadline(t *testing.T) {
	g := NewLeaseGuard("op.trustplane.dev")
	// The renewal was sent 9.9s ago: 100ms are left of the renew deadline.
	g.now = func() time.Time { return time.Now().Add(-(RenewDeadline - 100*time.Millisecond)) }
	var (
		deadline time.Time
		bounded  bool
	)
	rt := g.Wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		deadline, bounded = r.Context().Deadline()
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	renew, _ := http.NewRequest(http.MethodPut, "https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/op.trustplane.dev", nil)
	if _, err := rt.RoundTrip(renew); err != nil {
		t.Fatal(err)
	}
	g.now = time.Now
	write, _ := http.NewRequest(http.MethodPatch, "https://api/api/v1/namespaces/ns/configmaps/x", nil)
	sent := time.Now()
	resp, err := rt.RoundTrip(write)
	if err != nil {
		t.Fatalf("a write of the leader within the renew deadline was refused: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if !bounded {
		t.Fatalf("a write allowed 100ms before the renew deadline went out with no deadline: it can land any time later, " +
			"after the lease passed to another replica")
	}
	if left := deadline.Sub(sent); left > time.Second {
		t.Fatalf("a write allowed 100ms before the renew deadline may still land %s later", left.Round(time.Millisecond))
	}
}
