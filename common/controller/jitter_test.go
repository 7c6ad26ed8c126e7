package controller_test

import (
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/controller"
)

// Failure mode 6: jitter only lengthens, within [d, d*(1+factor)].
func TestJitterOnlyLengthens(t *testing.T) {
	const d = 30 * time.Minute
	const factor = 0.7
	upper := time.Duration(float64(d) * (1 + factor))
	if got := controller.Jitter(d, factor, func() float64 { return 0 }); got != d {
		t.Fatalf("rnd=0: got %s, want %s", got, d)
	}
	if got := controller.Jitter(d, factor, func() float64 { return 0.999999 }); got > upper || got < d {
		t.Fatalf("rnd~1: got %s, want within [%s, %s]", got, d, upper)
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 10000; i++ {
		got := controller.Jitter(d, factor, nil)
		if got < d || got > upper {
			t.Fatalf("sample %d: %s outside [%s, %s]", i, got, d, upper)
		}
		seen[got] = true
	}
	if len(seen) < 100 {
		t.Fatalf("jitter must spread requeues, saw only %d distinct values", len(seen))
	}
	if got := controller.Jitter(d, 0, nil); got != d {
		t.Fatalf("factor 0 must not change d, got %s", got)
	}
}
