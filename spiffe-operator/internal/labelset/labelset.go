// Package labelset holds Set, a compact, immutable set of labels for the
// caches that keep the labels of every pod and workload: a sorted slice of
// keys and values takes about a third of the memory of a map, and the keys,
// which repeat across objects, are stored once.
package labelset

import (
	"maps"
	"slices"
	"strings"
	"unique"

	"k8s.io/apimachinery/pkg/labels"
)

// Set is a set of labels: keys and values alternating, sorted by key. The
// zero Set is empty. A Set is never changed once made, so copies share it.
// It implements labels.Labels.
type Set struct {
	kv []string
}

var _ labels.Labels = Set{}

// FromMap returns the Set of m.
func FromMap(m map[string]string) Set {
	if len(m) == 0 {
		return Set{}
	}
	kv := make([]string, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, unique.Make(k).Value(), m[k])
	}
	return Set{kv: kv}
}

// Lookup returns the value of key and whether the set has it.
func (s Set) Lookup(key string) (string, bool) {
	lo, hi := 0, len(s.kv)/2
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch c := strings.Compare(s.kv[2*mid], key); {
		case c == 0:
			return s.kv[2*mid+1], true
		case c < 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return "", false
}

// Get returns the value of key, "" when the set does not have it.
func (s Set) Get(key string) string {
	v, _ := s.Lookup(key)
	return v
}

// Has reports whether the set has key.
func (s Set) Has(key string) bool {
	_, ok := s.Lookup(key)
	return ok
}

// Len returns the number of labels.
func (s Set) Len() int { return len(s.kv) / 2 }

// Map returns the labels as a new map; nil for the empty set.
func (s Set) Map() map[string]string {
	if len(s.kv) == 0 {
		return nil
	}
	m := make(map[string]string, len(s.kv)/2)
	for i := 0; i < len(s.kv); i += 2 {
		m[s.kv[i]] = s.kv[i+1]
	}
	return m
}

// Equal reports whether s and o hold the same labels.
func (s Set) Equal(o Set) bool { return slices.Equal(s.kv, o.kv) }

// MapSubset reports whether every label of sub is in set with the same
// value: whether an object labelled set matches the selector sub.
func MapSubset(sub, set map[string]string) bool {
	for k, v := range sub {
		if have, ok := set[k]; !ok || have != v {
			return false
		}
	}
	return true
}
