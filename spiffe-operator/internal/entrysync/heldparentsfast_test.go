package entrysync

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// heldParentsOracle is HeldParentsAfter as its doc states it, computed
// apart: the recorded parents and those where the views hold an entry of
// the owner tagged tag, each touched one in only when it is held there
// (or the pass failed); sorted, without repeats.
func heldParentsOracle(s *Syncer, tag string, recorded []string, touched []spiffeid.ID, failed bool) []string {
	in := map[string]bool{}
	for _, p := range recorded {
		in[p] = true
	}
	for key, v := range s.views {
		if v.held[tag] > 0 {
			in[key] = true
		}
	}
	for _, p := range touched {
		v := s.views[p.String()]
		in[p.String()] = failed || v != nil && v.held[tag] > 0
	}
	var out []string
	for p, ok := range in {
		if ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// TestHeldParentsAfterAgreesWithItsDefinition: the answer that a record
// stands as it is (no copy) must be the answer the full computation
// gives, for records sorted or not, with repeats, missing or extra
// parents, touched parents held or not, failed passes or not.
func TestHeldParentsAfterAgreesWithItsDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	o := owner("a", 0)
	tag := o.Tag()
	var parents []string
	for i := range 5 {
		parents = append(parents, fmt.Sprintf("spiffe://example.org/agent/%d", i))
	}
	for try := range 5000 {
		s := New(nil, Options{})
		for _, p := range parents {
			switch rng.IntN(3) {
			case 0: // no view
			case 1:
				s.views[p] = newParentView()
			default:
				v := newParentView()
				v.held[tag] = 1 + rng.IntN(2)
				s.views[p] = v
			}
		}
		var recorded []string
		for _, p := range parents {
			for range rng.IntN(3) - rng.IntN(2) {
				recorded = append(recorded, p)
			}
		}
		if rng.IntN(4) == 0 {
			rng.Shuffle(len(recorded), func(i, j int) { recorded[i], recorded[j] = recorded[j], recorded[i] })
		}
		var touched []spiffeid.ID
		for _, p := range parents {
			if rng.IntN(3) == 0 {
				touched = append(touched, spiffeid.RequireFromString(p))
			}
		}
		failed := rng.IntN(5) == 0
		want := heldParentsOracle(s, tag, recorded, touched, failed)
		if got := s.HeldParentsAfter(o, slices.Clone(recorded), touched, failed); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("try %d: recorded %v, touched %v, failed %v: got %v, want %v", try, recorded, touched, failed, got, want)
		}
	}
}

// TestARecordThatStandsCostsAsMuchWhateverItsSize: an incremental pass
// calls HeldParentsAfter with the policy's recorded parents, a hundred with
// per-node parents on a hundred nodes, and most passes change none. It
// copied them into a set and sorted them every pass; a record that stands
// now comes back as it is, for as little with a hundred parents as with one.
func TestARecordThatStandsCostsAsMuchWhateverItsSize(t *testing.T) {
	cost := func(n int) float64 {
		o := owner("a", 0)
		s := New(nil, Options{})
		var recorded []string
		for i := range n {
			p := fmt.Sprintf("spiffe://example.org/agent/%03d", i)
			v := newParentView()
			v.held[o.Tag()] = 1
			s.views[p] = v
			recorded = append(recorded, p)
		}
		touched := []spiffeid.ID{spiffeid.RequireFromString(recorded[0])}
		return testing.AllocsPerRun(20, func() {
			if got := s.HeldParentsAfter(o, recorded, touched, false); len(got) != n {
				t.Fatalf("%d parents, want %d", len(got), n)
			}
		})
	}
	if one, hundred := cost(1), cost(100); hundred > one {
		t.Errorf("a record that stands cost %v allocations with 100 parents, %v with one", hundred, one)
	}
}
