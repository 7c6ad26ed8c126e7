package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownWrites remembers, per object, the object as the controller's last
// write of it (a status or finalizer patch) left it on the server, and the
// versions known to be older: the one that write was made over and, when
// that was the object an earlier remembered write left, the versions older
// than that one. The response to a write arrives before the cache shows
// it, so the next pass, started by another event a moment later, often
// reads one of those older versions: a copy outdated by the controller's
// own writes alone. The pass works from the remembered object instead
// (read your own writes). The record goes once a read shows a version not
// known to be older: the cache has shown the write, or a later change.
//
// A record no read comes to forget (the object's pass ended without a
// requeue and the own-write event starts none) goes once it is older than
// ownWriteMaxAge: record sweeps such records at most once per
// ownWriteMaxAge, so the records held are those of writes made in the last
// two periods, not of every object ever written.
type ownWrites struct {
	mu   sync.Mutex
	last map[types.NamespacedName]ownWrite
	// now tells the time; time.Now outside tests.
	now func() time.Time
	// swept is when record last swept out aged records.
	swept time.Time
}

// ownWriteMaxAge is how long a write is remembered. A cache shows a write
// within milliseconds to seconds; a pass that reads an outdated copy after
// its record has aged out finds its status patch refused by the optimistic
// lock and runs again, as without the record.
const ownWriteMaxAge = time.Minute

// ownWrite is the last write of one object.
type ownWrite struct {
	// older are the versions known to be older than result.
	older map[string]struct{}
	// result is the object as the write left it; never modified.
	result client.Object
	// at is when the write was recorded.
	at time.Time
}

func newOwnWrites(now func() time.Time) *ownWrites {
	return &ownWrites{last: map[types.NamespacedName]ownWrite{}, now: now, swept: now()}
}

// since returns the object as the controller's last write of key left it
// when rv is a version known to be older (the cache has not shown that
// write yet), and nil otherwise; the caller must not modify it. A read of
// any other version forgets the write.
func (s *ownWrites) since(key types.NamespacedName, rv string) client.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.last[key]
	if !ok {
		return nil
	}
	if _, older := w.older[rv]; !older || s.aged(w) {
		delete(s.last, key)
		return nil
	}
	return w.result
}

// record remembers that a write of key made over version over left the
// object result, which it keeps (without managed fields, which no pass
// reads) and which must not be modified afterwards.
func (s *ownWrites) record(key types.NamespacedName, over string, result client.Object) {
	result.SetManagedFields(nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	older := map[string]struct{}{}
	if w, ok := s.last[key]; ok && w.result.GetResourceVersion() == over {
		// Made over the object the last write left: what was older than
		// that is older than this.
		older = w.older
	}
	older[over] = struct{}{}
	now := s.now()
	s.last[key] = ownWrite{older: older, result: result, at: now}
	if now.Sub(s.swept) >= ownWriteMaxAge {
		s.swept = now
		for k, w := range s.last {
			if s.aged(w) {
				delete(s.last, k)
			}
		}
	}
}

// aged tells whether w is older than ownWriteMaxAge.
func (s *ownWrites) aged(w ownWrite) bool {
	return s.now().Sub(w.at) > ownWriteMaxAge
}

// size returns how many writes are remembered.
func (s *ownWrites) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.last)
}

func (s *ownWrites) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, key)
}
