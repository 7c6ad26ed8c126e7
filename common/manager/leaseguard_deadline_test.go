package manager

import (
	"net/http"
	"sync"
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
	g, rt, lastDeadline := guardRenewedAgo(t, 100*time.Millisecond)
	g.now = time.Now
	sent := time.Now()
	if err := writeThrough(rt); err != nil {
		t.Fatalf("a write of the leader within the renew deadline was refused: %v", err)
	}
	deadline, bounded := lastDeadline()
	if !bounded {
		t.Fatalf("a write allowed 100ms before the renew deadline went out with no deadline: it can land any time later, " +
			"after the lease passed to another replica")
	}
	if left := deadline.Sub(sent); left > time.Second {
		t.Fatalf("a write allowed 100ms before the renew deadline may still land %s later", left.Round(time.Millisecond))
	}
}

// TestAPauseAfterTheGuardReadsTheClockDoesNotExtendTheWrite: the guard
// read the clock and returned a length of time, which RoundTrip turned
// into a deadline at a later reading of the clock: a pause of the process
// between the two (SIGSTOP, a frozen VM, a long GC pause: what the guard
// exists for) pushed the request's deadline past the renew deadline by the
// pause. Here the clock is read 200ms before the renew deadline and the
// process is paused 500ms right after that reading.
func TestAPauseAfterTheGuardReadsTheClockDoesNotExtendTheWrite(t *testing.T) {
	g, rt, lastDeadline := guardRenewedAgo(t, 200*time.Millisecond)
	renewDeadline := time.Now().Add(200 * time.Millisecond)
	g.now = func() time.Time {
		n := time.Now()
		time.Sleep(500 * time.Millisecond) // the process is paused right after the clock was read
		return n
	}
	if err := writeThrough(rt); err != nil {
		t.Fatalf("the write, allowed before the pause, was refused: %v", err)
	}
	deadline, _ := lastDeadline()
	if late := deadline.Sub(renewDeadline); late > 50*time.Millisecond {
		t.Fatalf("the write went out with a deadline %s past the renew deadline: the pause after the guard read the clock "+
			"was added to the time the write may take", late.Round(time.Millisecond))
	}
}

// guardRenewedAgo returns a guard whose lease was renewed, through its own
// transport, so long ago that left remains of the renew deadline; that
// transport, around a round tripper that records each request's deadline;
// and a function returning the last deadline recorded.
func guardRenewedAgo(t *testing.T, left time.Duration) (*LeaseGuard, http.RoundTripper, func() (time.Time, bool)) {
	t.Helper()
	g := NewLeaseGuard("op.trustplane.dev")
	g.now = func() time.Time { return time.Now().Add(-(RenewDeadline - left)) }
	var (
		mu       sync.Mutex
		deadline time.Time
		bounded  bool
	)
	rt := g.Wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		deadline, bounded = r.Context().Deadline()
		mu.Unlock()
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	renew, _ := http.NewRequest(http.MethodPut, "https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/op.trustplane.dev", nil)
	if _, err := rt.RoundTrip(renew); err != nil {
		t.Fatal(err)
	}
	return g, rt, func() (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		return deadline, bounded
	}
}

// writeThrough sends a ConfigMap patch through rt and closes the response.
func writeThrough(rt http.RoundTripper) error {
	write, _ := http.NewRequest(http.MethodPatch, "https://api/api/v1/namespaces/ns/configmaps/x", nil)
	resp, err := rt.RoundTrip(write)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
