package entrysync

import (
	"testing"
	"time"
)

// TestAViewIsFreshOnlyWhenListedValidAndYoungerThanTheInterval: every
// pass that decides whether to trust a view (SyncDelta, a recheck of kept
// entries, ensureListed and ViewsDue) asks parentView.fresh, so the one
// rule is checked here at its edges: a missing view, an invalid one, one
// exactly the interval old and one a nanosecond younger.
func TestAViewIsFreshOnlyWhenListedValidAndYoungerThanTheInterval(t *testing.T) {
	const interval = 10 * time.Minute
	listed := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		view *parentView
		now  time.Time
		want bool
	}{
		{"no view", nil, listed, false},
		{"never listed", &parentView{}, listed, false},
		{"invalidated by a write of unknown outcome", &parentView{valid: false, listedAt: listed}, listed.Add(time.Second), false},
		{"just listed", &parentView{valid: true, listedAt: listed}, listed, true},
		{"a nanosecond under the interval", &parentView{valid: true, listedAt: listed}, listed.Add(interval - time.Nanosecond), true},
		{"exactly the interval old", &parentView{valid: true, listedAt: listed}, listed.Add(interval), false},
		{"older than the interval", &parentView{valid: true, listedAt: listed}, listed.Add(2 * interval), false},
	}
	for _, c := range cases {
		if got := c.view.fresh(c.now, interval); got != c.want {
			t.Errorf("%s: fresh = %v, want %v", c.name, got, c.want)
		}
	}
}
