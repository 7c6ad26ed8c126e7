package labelset

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// FuzzSetAgreesWithTheMap checks Set against the map it is made from, the
// oracle: every key of the map and every probe key (present or not, prefix
// or extension of a present one) looks up as in the map, Len and Map give
// the map back, and Equal holds exactly when the maps are equal.
func FuzzSetAgreesWithTheMap(f *testing.F) {
	f.Add("app=web,pod-template-hash=abc", "app", "app=web")
	f.Add("", "x", "")
	f.Add("a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9", "e", "a=1,b=2")
	f.Add("k=,=v", "", "k=")
	f.Fuzz(func(t *testing.T, pairs, probe, other string) {
		m, o := parse(pairs), parse(other)
		s := FromMap(m)
		if s.Len() != len(m) {
			t.Fatalf("Len = %d, want %d", s.Len(), len(m))
		}
		if got := s.Map(); !maps.Equal(got, m) || (len(m) == 0) != (got == nil) {
			t.Fatalf("Map = %v, want %v", got, m)
		}
		keys := []string{probe, probe + "x", "", "\x00", "\xff"}
		if len(probe) > 0 {
			keys = append(keys, probe[:len(probe)-1])
		}
		for k := range m {
			keys = append(keys, k, k+"\x00", strings.ToUpper(k))
			if len(k) > 0 {
				keys = append(keys, k[:len(k)-1])
			}
		}
		for _, k := range keys {
			want, wantOK := m[k]
			if got, ok := s.Lookup(k); got != want || ok != wantOK {
				t.Fatalf("Lookup(%q) = %q, %v; want %q, %v (set of %v)", k, got, ok, want, wantOK, m)
			}
			if s.Has(k) != wantOK || s.Get(k) != want {
				t.Fatalf("Has/Get(%q) disagree with the map %v", k, m)
			}
		}
		if s.Equal(FromMap(o)) != maps.Equal(m, o) {
			t.Fatalf("Equal(%v, %v) = %v", m, o, s.Equal(FromMap(o)))
		}
	})
}

// parse reads "k=v,k=v" into a map (a pair without '=' is a key with an
// empty value; later pairs win).
func parse(s string) map[string]string {
	if s == "" {
		return map[string]string{}
	}
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

// TestMapSubsetMatchesAsASelectorDoes checks MapSubset against
// apimachinery's equality selector of the same labels.
func TestMapSubsetMatchesAsASelectorDoes(t *testing.T) {
	sets := []map[string]string{nil, {}, {"app": "web"}, {"app": "api"}, {"app": "web", "tier": "x"}, {"tier": "x"}, {"app": ""}}
	for _, sub := range sets {
		for _, set := range sets {
			want := labels.SelectorFromSet(sub).Matches(labels.Set(set))
			if got := MapSubset(sub, set); got != want {
				t.Errorf("MapSubset(%v, %v) = %v, a selector of %v matches %v: %v", sub, set, got, sub, set, want)
			}
		}
	}
}
