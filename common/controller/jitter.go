package controller

import (
	"math"
	"math/rand/v2"
	"time"
)

// Jitter lengthens d by a random share in [0, factor): the result lies in
// [d, d*(1+factor)]. It never shortens d, so a requeue never comes early and
// many objects created together spread their resyncs out. rnd returns a value
// in [0, 1); nil means math/rand/v2. A factor that is not a positive number
// (NaN included) adds nothing, and a result beyond the longest Duration is
// that Duration: it never wraps around to a negative delay, which
// controller-runtime would take for no requeue at all.
func Jitter(d time.Duration, factor float64, rnd func() float64) time.Duration {
	if d <= 0 || !(factor > 0) {
		return d
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	extra := float64(d) * factor * rnd()
	if !(extra > 0) {
		return d
	}
	if float64(d)+extra >= math.MaxInt64 {
		return math.MaxInt64
	}
	return d + time.Duration(extra)
}
