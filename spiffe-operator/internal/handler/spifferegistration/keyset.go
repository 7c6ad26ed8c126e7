package spifferegistration

import (
	"iter"
	"slices"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// keySetInline is how many keys a keySet keeps in a slice before it
// switches to a map.
const keySetInline = 8

// keySet is a set of entry keys. The keys of one service account are
// usually one or a few: a slice holds up to keySetInline of them, a
// fraction of an empty map's size, and a map holds more.
type keySet struct {
	few  []entries.Key
	many map[entries.Key]struct{}
}

// add puts k in the set.
func (s *keySet) add(k entries.Key) {
	switch {
	case s.many != nil:
		s.many[k] = struct{}{}
	case slices.Contains(s.few, k):
	case len(s.few) < keySetInline:
		s.few = append(s.few, k)
	default:
		s.many = make(map[entries.Key]struct{}, 2*keySetInline)
		for _, f := range s.few {
			s.many[f] = struct{}{}
		}
		s.many[k] = struct{}{}
		s.few = nil
	}
}

// remove takes k out of the set.
func (s *keySet) remove(k entries.Key) {
	if s.many != nil {
		delete(s.many, k)
		return
	}
	if i := slices.Index(s.few, k); i >= 0 {
		s.few = slices.Delete(s.few, i, i+1)
	}
}

// len returns the number of keys in the set.
func (s *keySet) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}

// all yields the keys of the set, in no particular order. The set must
// not change while it is iterated.
func (s *keySet) all() iter.Seq[entries.Key] {
	return func(yield func(entries.Key) bool) {
		if s == nil {
			return
		}
		if s.many != nil {
			for k := range s.many {
				if !yield(k) {
					return
				}
			}
			return
		}
		for _, k := range s.few {
			if !yield(k) {
				return
			}
		}
	}
}
