package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusWrites remembers, per object, the controller's last status write:
// the resourceVersion it was made over and the object as the server
// returned it, until a pass reads another version of the object. The
// response to a write arrives before the cache shows it, so the next pass,
// started by another event a moment later, often reads exactly the version
// the write was made over. That copy is outdated by the controller's own
// write alone, and the object the write returned is what the cache will
// show: the pass works from that one instead (read your own writes).
type statusWrites struct {
	mu   sync.Mutex
	last map[types.NamespacedName]statusWrite
}

// statusWrite is one status write: the version it was made over and the
// object it left on the server.
type statusWrite struct {
	over   string
	result client.Object
}

func newStatusWrites() *statusWrites {
	return &statusWrites{last: map[types.NamespacedName]statusWrite{}}
}

// since returns the object as the controller's last status write of key left
// it, when rv is the version that write was made over (the cache has not
// shown the write yet); nil otherwise. A read of any other version forgets
// the write: the cache has shown it, or a later change.
func (s *statusWrites) since(key types.NamespacedName, rv string) client.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.last[key]
	if !ok {
		return nil
	}
	if w.over != rv {
		delete(s.last, key)
		return nil
	}
	return w.result
}

// record remembers that key's status was written over version over and
// left the object result (which must not be modified afterwards).
func (s *statusWrites) record(key types.NamespacedName, over string, result client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[key] = statusWrite{over: over, result: result}
}

func (s *statusWrites) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, key)
}
