package controller

import (
	"math/rand/v2"
	"time"
)

// Jitter lengthens d by a random share in [0, factor): the result lies in
// [d, d*(1+factor)]. It never shortens d, so a requeue never comes early and
// many objects created together spread their resyncs out. rnd returns a value
// in [0, 1); nil means math/rand/v2.
func Jitter(d time.Duration, factor float64, rnd func() float64) time.Duration {
	if d <= 0 || factor <= 0 {
		return d
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	return d + time.Duration(float64(d)*factor*rnd())
}
