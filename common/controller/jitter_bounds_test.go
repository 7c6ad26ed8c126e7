package controller_test

import (
	"math"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/controller"
)

// Jitter never shortens a requeue, whatever the factor: a factor that is
// not a number must not turn a resync into a negative delay (which
// controller-runtime treats as no requeue at all).
func TestJitterWithNaNFactorNeverShortens(t *testing.T) {
	const d = 30 * time.Minute
	for _, r := range []float64{0, 0.5, 0.999} {
		if got := controller.Jitter(d, math.NaN(), func() float64 { return r }); got < d {
			t.Fatalf("Jitter(%s, NaN, rnd=%v) = %s, shorter than %s", d, r, got, d)
		}
	}
}

// Jitter of a long delay saturates rather than wrapping around to a
// negative duration.
func TestJitterOfALongDelayNeverWraps(t *testing.T) {
	for _, d := range []time.Duration{2000000 * time.Hour, time.Duration(math.MaxInt64 / 2), time.Duration(math.MaxInt64 - 1)} {
		got := controller.Jitter(d, 1, func() float64 { return 0.999 })
		if got < d {
			t.Fatalf("Jitter(%s, 1, rnd=0.999) = %s, shorter than %s", d, got, d)
		}
	}
}
