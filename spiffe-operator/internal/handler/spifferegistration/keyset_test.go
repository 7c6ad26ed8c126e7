package spifferegistration

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestKeySetMatchesAMap runs random adds and removes, across the switch
// from slice to map and back to few keys, against a map as the oracle.
func TestKeySetMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var s keySet
		oracle := map[entries.Key]struct{}{}
		universe := 1 + rng.IntN(3*keySetInline)
		for range 100 {
			k := entries.Key(fmt.Sprintf("k%d", rng.IntN(universe)))
			if rng.IntN(3) == 0 {
				s.remove(k)
				delete(oracle, k)
			} else {
				s.add(k)
				oracle[k] = struct{}{}
			}
			got := slices.Sorted(s.all())
			want := slices.Sorted(maps.Keys(oracle))
			if !slices.Equal(got, want) || s.len() != len(oracle) {
				t.Fatalf("round %d: set holds %v (len %d), want %v", round, got, s.len(), want)
			}
		}
	}
	var absent *keySet
	if n := len(slices.Collect(absent.all())); n != 0 {
		t.Errorf("a nil set yields %d keys", n)
	}
}
