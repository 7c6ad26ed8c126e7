package ctrlerrors_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/trustplane/trustplane/common/ctrlerrors"
)

// A handler returns a Blocked error when the object waits on something
// outside it: the Controller sets Processing=Blocked and Ready=False with the
// error's reason and message, and resyncs without a hot loop.
func ExampleBlockedErrorf() {
	err := ctrlerrors.WithReason("SecretMissing", ctrlerrors.BlockedErrorf("secret %s/%s does not exist", "ns", "ca"))
	fmt.Println(ctrlerrors.IsBlocked(err), ctrlerrors.Reason(err, "Blocked"), err)
	// Output: true SecretMissing secret ns/ca does not exist
}

// A Retryable error with a delay is retried after that delay (lengthened by
// the jitter), not through the per-object backoff.
func ExampleRetryableWithDelayErrorf() {
	cause := errors.New("connection refused")
	err := ctrlerrors.RetryableWithDelayErrorf(10*time.Second, "SPIRE is not reachable: %w", cause)
	r, ok := ctrlerrors.AsRetryable(err)
	fmt.Println(ok, r.Delay, errors.Is(err, cause), ctrlerrors.Reason(err, ""))
	// Output: true 10s true Retrying
}

// WithReason keeps the kind of the error it wraps; the outermost reason wins.
func ExampleWithReason() {
	inner := ctrlerrors.WithReason("Inner", ctrlerrors.RetryableErrorf("not yet"))
	outer := ctrlerrors.WithReason("Outer", fmt.Errorf("render: %w", inner))
	_, retryable := ctrlerrors.AsRetryable(outer)
	fmt.Println(ctrlerrors.Reason(outer, "ReconcileError"), retryable)
	// Output: Outer true
}
