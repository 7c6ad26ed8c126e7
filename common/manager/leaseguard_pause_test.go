package manager

import (
	"net/http"
	"testing"
	"time"
)

// TestAPauseAfterTheGuardReadsTheClockDoesNotExtendTheWrite: the guard
// read the clock and returned a length of time, which RoundTrip turned
// into a deadline at a later reading of the clock: a pause of the process
// between the two (SIGSTOP, a frozen VM, a long GC pause: what the guard
// exists for) pushed the request's deadline past the renew deadline by the
// pause. Here the clock is read 200ms before the renew deadline and the
// process is paused 500ms right after that reading.
func TestAPauseAfterTheGuardReadsTheClockDoesNotExtendTheWrite(t *testing.T) {
	g := NewLeaseGuard("op.trustplane.dev")
	// The renewal was sent 9.8s ago: the renew deadline is 200ms away.
	g.now = func() time.Time { return time.Now().Add(-(RenewDeadline - 200*time.Millisecond)) }
	var deadline time.Time
	rt := g.Wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		deadline, _ = r.Context().Deadline()
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	renew, _ := http.NewRequest(http.MethodPut, "https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/op.trustplane.dev", nil)
	if _, err := rt.RoundTrip(renew); err != nil {
		t.Fatal(err)
	}
	renewDeadline := time.Now().Add(200 * time.Millisecond)
	g.now = func() time.Time {
		n := time.Now()
		time.Sleep(500 * time.Millisecond) // the process is paused right after the clock was read
		return n
	}
	write, _ := http.NewRequest(http.MethodPatch, "https://api/api/v1/namespaces/ns/configmaps/x", nil)
	resp, err := rt.RoundTrip(write)
	if err != nil {
		t.Fatalf("the write, allowed before the pause, was refused: %v", err)
	}
	_ = resp.Body.Close()
	if late := deadline.Sub(renewDeadline); late > 50*time.Millisecond {
		t.Fatalf("the write went out with a deadline %s past the renew deadline: the pause after the guard read the clock "+
			"was added to the time the write may take", late.Round(time.Millisecond))
	}
}
