package janitor

import (
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ConfirmedGone remembers, across passes, the owners whose Live children a
// Withdraw confirmed gone by an uncached read. A later Withdraw of such an
// owner, for the same Live types, that finds none of them in the cache
// either returns gone without reading uncached again: an owner that stays
// withdrawn (a binding in conflict, say) is requeued by every change of its
// peers, and each of those passes would otherwise list every one of its
// Live types from the API server.
//
// It is sound because an owner's children are written only through its
// janitors, and a janitor records each write or keep of a child (before it
// is sent and again when it returns), which ends the confirmation and keeps
// a read it overtook from being remembered. A new process starts with nothing
// remembered, so its first Withdraw of each owner reads uncached. Share one
// per controller (WithConfirmedGone), and Forget an owner once it is gone.
type ConfirmedGone struct {
	mu     sync.Mutex
	owners map[types.NamespacedName]*ownerRecord
}

// ownerRecord is what is known of one owner's children.
type ownerRecord struct {
	// writes counts the children its janitors marked or kept, so that a
	// confirmation read while one was being written is not remembered.
	writes uint64
	// confirmed is set by a Withdraw that confirmed the Live children of
	// kinds (see liveKinds) gone for the owner with uid, and cleared by
	// the next write: uid so that a new object under the same name is not
	// taken for it.
	confirmed bool
	uid       types.UID
	kinds     string
}

// NewConfirmedGone returns a ConfirmedGone that remembers no owner.
func NewConfirmedGone() *ConfirmedGone {
	return &ConfirmedGone{owners: map[types.NamespacedName]*ownerRecord{}}
}

// Forget drops what is remembered of the owner named key: call it once the
// owner is gone.
func (m *ConfirmedGone) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owners, key)
}

// Len returns how many owners are remembered with their children confirmed
// gone.
func (m *ConfirmedGone) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.owners {
		if r.confirmed {
			n++
		}
	}
	return n
}

// wrote records that a janitor of the owner named key is about to mark or
// keep a child: what was confirmed of it no longer holds.
func (m *ConfirmedGone) wrote(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.recordOf(key)
	r.writes++
	r.confirmed = false
}

// recordOf returns the record of the owner named key, made if there is
// none; m.mu must be held.
func (m *ConfirmedGone) recordOf(key types.NamespacedName) *ownerRecord {
	r := m.owners[key]
	if r == nil {
		r = &ownerRecord{}
		m.owners[key] = r
	}
	return r
}

// doubt drops the confirmation of the owner named key: the cache shows
// one of its children after all.
func (m *ConfirmedGone) doubt(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.owners[key]; r != nil {
		r.confirmed = false
	}
}

// writesOf returns the count of writes recorded for the owner named key,
// to be handed to remember.
func (m *ConfirmedGone) writesOf(key types.NamespacedName) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.owners[key]; r != nil {
		return r.writes
	}
	return 0
}

// confirmed reports whether a Withdraw confirmed the Live children of
// kinds gone for the owner named key with uid, with no write since.
func (m *ConfirmedGone) confirmed(key types.NamespacedName, uid types.UID, kinds string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.owners[key]
	return r != nil && r.confirmed && r.uid == uid && r.kinds == kinds
}

// remember records that the owner's Live children of kinds are confirmed
// gone by a read that began when writesOf returned writes; a write
// recorded since (another janitor of the owner) keeps it from being
// remembered.
func (m *ConfirmedGone) remember(key types.NamespacedName, uid types.UID, kinds string, writes uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.recordOf(key)
	if r.writes != writes {
		return
	}
	r.confirmed, r.uid, r.kinds = true, uid, kinds
}

// liveKinds names the Live types among declared, in a fixed order, so that
// what is remembered for one set of types never vouches for another.
func liveKinds(declared map[schema.GroupVersionKind]ChildType) string {
	var kinds []string
	for gvk, t := range declared {
		if t.Live {
			kinds = append(kinds, gvk.String())
		}
	}
	slices.Sort(kinds)
	return strings.Join(kinds, "\n")
}
