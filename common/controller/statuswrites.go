package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// statusWrites remembers, per object, the resourceVersion its last status
// write was made over, until a pass reads another version of the object. A
// pass that reads exactly that version again read a cached copy that has
// not seen the write yet: the object on the server is newer, so a status
// computed from the copy would be refused by the resourceVersion guard, and
// is not sent.
type statusWrites struct {
	mu   sync.Mutex
	over map[types.NamespacedName]string
}

func newStatusWrites() *statusWrites {
	return &statusWrites{over: map[types.NamespacedName]string{}}
}

// stale reports whether version rv of key is one the controller already
// wrote the status over. A read of any other version forgets the write: the
// cache has seen it (or a later change).
func (s *statusWrites) stale(key types.NamespacedName, rv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	over, ok := s.over[key]
	if ok && over != rv {
		delete(s.over, key)
	}
	return ok && over == rv
}

// record remembers that key's status was written over version rv.
func (s *statusWrites) record(key types.NamespacedName, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over[key] = rv
}

func (s *statusWrites) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.over, key)
}
