// Package ctrlerrors holds the errors a Handler returns to tell the Controller
// how to go on: Blocked (an unmet dependency), Retryable (retry soon through
// the rate limiter) and RetryableWithDelay (retry after a given time). Each
// may carry a condition reason. They are found with errors.As through %w
// wrapping, so handlers may add context freely.
package ctrlerrors

import (
	"errors"
	"fmt"
	"time"
)

// BlockedError reports an unmet dependency: the object cannot make progress
// until something outside it changes. The Controller sets Processing=Blocked
// and Ready=False and requeues on the normal schedule.
type BlockedError struct {
	err    error
	reason string
}

// Error implements error.
func (e *BlockedError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *BlockedError) Unwrap() error { return e.err }

// Reason is the condition reason to report, "Blocked" unless set.
func (e *BlockedError) Reason() string { return orDefault(e.reason, "Blocked") }

// RetryableError asks for a retry. With a zero Delay the retry goes through
// the controller's per-item exponential rate limiter.
type RetryableError struct {
	err    error
	reason string
	// Delay is how long to wait before the retry; zero means "ask the rate limiter".
	Delay time.Duration
}

// Error implements error.
func (e *RetryableError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *RetryableError) Unwrap() error { return e.err }

// Reason is the condition reason to report, "Retrying" unless set.
func (e *RetryableError) Reason() string { return orDefault(e.reason, "Retrying") }

// BlockedErrorf returns a BlockedError with a formatted message (%w allowed).
func BlockedErrorf(format string, args ...any) error {
	return &BlockedError{err: fmt.Errorf(format, args...)}
}

// RetryableErrorf returns a RetryableError retried through the rate limiter.
func RetryableErrorf(format string, args ...any) error {
	return &RetryableError{err: fmt.Errorf(format, args...)}
}

// RetryableWithDelayErrorf returns a RetryableError retried after d.
func RetryableWithDelayErrorf(d time.Duration, format string, args ...any) error {
	return &RetryableError{err: fmt.Errorf(format, args...), Delay: d}
}

// reasonError attaches a condition reason to any error.
type reasonError struct {
	err    error
	reason string
}

func (e *reasonError) Error() string  { return e.err.Error() }
func (e *reasonError) Unwrap() error  { return e.err }
func (e *reasonError) Reason() string { return e.reason }

// WithReason attaches a condition reason (CamelCase, e.g. "SpireUnavailable")
// to err, keeping its kind: a wrapped Blocked or Retryable error stays one.
// A nil err stays nil.
func WithReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &reasonError{err: err, reason: reason}
}

// Reason returns the condition reason carried by err, or fallback. The
// outermost reason wins, so a handler can refine a reason set deeper down.
func Reason(err error, fallback string) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		return r.Reason()
	}
	return fallback
}

// IsBlocked reports whether err wraps a BlockedError.
func IsBlocked(err error) bool {
	var b *BlockedError
	return errors.As(err, &b)
}

// AsRetryable returns the RetryableError wrapped in err, if any.
func AsRetryable(err error) (*RetryableError, bool) {
	var r *RetryableError
	ok := errors.As(err, &r)
	return r, ok
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
