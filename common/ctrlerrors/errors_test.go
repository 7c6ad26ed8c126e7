package ctrlerrors_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/ctrlerrors"
)

func TestErrorsAreFoundThroughWrapping(t *testing.T) {
	blocked := fmt.Errorf("outer: %w", ctrlerrors.BlockedErrorf("need %s", "x"))
	if !ctrlerrors.IsBlocked(blocked) {
		t.Fatal("a wrapped BlockedError must be found")
	}
	if got := blocked.Error(); got != "outer: need x" {
		t.Fatalf("message = %q", got)
	}
	if ctrlerrors.IsBlocked(errors.New("plain")) {
		t.Fatal("a plain error is not blocked")
	}

	delayed := fmt.Errorf("ctx: %w", ctrlerrors.RetryableWithDelayErrorf(3*time.Second, "later"))
	r, ok := ctrlerrors.AsRetryable(delayed)
	if !ok || r.Delay != 3*time.Second {
		t.Fatalf("AsRetryable = %v, %v", r, ok)
	}
	r, ok = ctrlerrors.AsRetryable(ctrlerrors.RetryableErrorf("soon"))
	if !ok || r.Delay != 0 {
		t.Fatalf("RetryableErrorf must have no delay, got %v %v", r, ok)
	}
	if _, ok := ctrlerrors.AsRetryable(blocked); ok {
		t.Fatal("a blocked error is not retryable")
	}
}

func TestWrappedCauseStaysReachable(t *testing.T) {
	cause := errors.New("root cause")
	err := ctrlerrors.RetryableErrorf("call failed: %w", cause)
	if !errors.Is(err, cause) {
		t.Fatal("the cause must be reachable with errors.Is")
	}
}

func TestReason(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"blocked default", ctrlerrors.BlockedErrorf("x"), "Blocked"},
		{"retryable default", ctrlerrors.RetryableErrorf("x"), "Retrying"},
		{"explicit reason wins", ctrlerrors.WithReason("SpireUnavailable", ctrlerrors.RetryableErrorf("x")), "SpireUnavailable"},
		{"reason through wrapping", fmt.Errorf("a: %w", ctrlerrors.WithReason("InvalidTemplate", errors.New("x"))), "InvalidTemplate"},
		{"plain error falls back", errors.New("x"), "Fallback"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ctrlerrors.Reason(c.err, "Fallback"); got != c.want {
				t.Fatalf("Reason = %q, want %q", got, c.want)
			}
		})
	}
	if ctrlerrors.WithReason("X", nil) != nil {
		t.Fatal("WithReason(nil) must stay nil")
	}
	kept := ctrlerrors.WithReason("X", ctrlerrors.BlockedErrorf("y"))
	if !ctrlerrors.IsBlocked(kept) {
		t.Fatal("WithReason must keep the kind of the error")
	}
}
