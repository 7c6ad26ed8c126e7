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
// janitors, and a janitor forgets its owner before it writes or keeps a
// child (SetOwnership, Keep). A new process starts with nothing
// remembered, so its first Withdraw of each owner reads uncached. Share one
// per controller (WithConfirmedGone), and Forget an owner once it is gone.
type ConfirmedGone struct {
	mu     sync.Mutex
	owners map[types.NamespacedName]confirmedChildren
}

// confirmedChildren is what a Withdraw confirmed of one owner: its UID, so
// that a new object under the same name is not taken for it, and the Live
// types it read (see liveKinds).
type confirmedChildren struct {
	uid   types.UID
	kinds string
}

// NewConfirmedGone returns a ConfirmedGone that remembers no owner.
func NewConfirmedGone() *ConfirmedGone {
	return &ConfirmedGone{owners: map[types.NamespacedName]confirmedChildren{}}
}

// Forget drops what is remembered of the owner named key.
func (m *ConfirmedGone) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owners, key)
}

// Len returns how many owners are remembered.
func (m *ConfirmedGone) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owners)
}

// confirmed reports whether a Withdraw confirmed the Live children of the
// kinds liveKinds names gone for the owner named key with uid.
func (m *ConfirmedGone) confirmed(key types.NamespacedName, uid types.UID, kinds string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.owners[key]
	return ok && c.uid == uid && c.kinds == kinds
}

// remember records that the owner's Live children of kinds are confirmed
// gone.
func (m *ConfirmedGone) remember(key types.NamespacedName, uid types.UID, kinds string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owners[key] = confirmedChildren{uid: uid, kinds: kinds}
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
