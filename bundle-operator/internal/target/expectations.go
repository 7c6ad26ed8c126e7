package target

import (
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectationTTL bounds how long a write waits to be seen by the cache
// before the cache is trusted again, in case an event was lost.
const expectationTTL = 30 * time.Second

// Expectations remember writes the cache has not seen yet. Without them a
// pass that starts before the watch delivered our last write would find the
// target missing or stale in the cache and write it again. A write is
// expected until the cache sees a resourceVersion at least as new.
type Expectations struct {
	mu      sync.Mutex
	pending map[string]expectation
	now     func() time.Time
}

type expectation struct {
	rv uint64
	at time.Time
	// gone marks the delete of an object the cache held: it is seen once
	// the cache holds no object of that name, whether or not the delete's
	// event is still to come (it may have passed before the delete call
	// returned and the expectation was recorded).
	gone bool
}

// NewExpectations returns empty Expectations.
func NewExpectations() *Expectations {
	return &Expectations{pending: map[string]expectation{}, now: time.Now}
}

func expectationKey(kind Kind, ns, name string) string { return string(kind) + "/" + ns + "/" + name }

// expect records that we wrote the target at resourceVersion rv.
func (e *Expectations) expect(kind Kind, ns, name, rv string) {
	e.record(kind, ns, name, rv, false)
}

// expectGone records that we deleted the target, which the cache held;
// rv is a resourceVersion the delete's event carries at least.
func (e *Expectations) expectGone(kind Kind, ns, name, rv string) {
	e.record(kind, ns, name, rv, true)
}

func (e *Expectations) record(kind Kind, ns, name, rv string, gone bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return // an opaque resourceVersion cannot be ordered: trust the cache
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending[expectationKey(kind, ns, name)] = expectation{rv: n, at: e.now(), gone: gone}
}

// satisfied reports whether no write of ours to the target is in flight,
// given the resourceVersion the cache holds ("" when it holds none). When
// one is, the caller must not act on the cache for this target. Checking
// the cached version here, not only in Observe, covers a watch event that
// arrived before the write returned and was recorded.
func (e *Expectations) satisfied(kind Kind, ns, name, cachedRV string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := expectationKey(kind, ns, name)
	exp, ok := e.pending[key]
	if !ok {
		return true
	}
	n, err := strconv.ParseUint(cachedRV, 10, 64)
	if (err == nil && n >= exp.rv) || (exp.gone && cachedRV == "") || e.now().Sub(exp.at) > expectationTTL {
		delete(e.pending, key)
		return true
	}
	return false
}

// Observe is called for every watch event of a target: once the cache holds
// the resourceVersion we wrote (or a newer one) the expectation is met.
func (e *Expectations) Observe(kind Kind, obj client.Object) {
	n, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	e.mu.Lock()
	defer e.mu.Unlock()
	key := expectationKey(kind, obj.GetNamespace(), obj.GetName())
	exp, ok := e.pending[key]
	if ok && (err != nil || n >= exp.rv) {
		delete(e.pending, key)
	}
}
