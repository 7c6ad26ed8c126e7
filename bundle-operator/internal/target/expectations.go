package target

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectationTTL bounds how long a write waits to be seen by the cache
// before the cache is trusted again, in case an event was lost.
const expectationTTL = 30 * time.Second

// Expectations remember writes the cache has not seen yet. Without them a
// pass that starts before the watch delivered our last write would find the
// target missing or stale in the cache and write it again; and a release
// that lists the cache would miss a target we wrote (see writing). A write
// is expected until the cache sees a resourceVersion at least as new. The
// zero value is ready to use.
type Expectations struct {
	mu      sync.Mutex
	pending map[expectationKey]expectation
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
	// bundle names the TrustBundle whose content the write put in the
	// target (see expectFor); empty for a release, which takes ours out.
	bundle string
}

// expectationKey names a target: its kind, namespace ("" for a
// cluster-scoped one) and name.
type expectationKey struct {
	kind      Kind
	namespace string
	name      string
}

// NewExpectations returns empty Expectations.
func NewExpectations() *Expectations {
	return &Expectations{pending: map[expectationKey]expectation{}, now: time.Now}
}

// expect records that we wrote the target at resourceVersion rv to release
// it (an apply that drops our fields).
func (e *Expectations) expect(kind Kind, ns, name, rv string) {
	e.record(kind, ns, name, rv, false, "")
}

// expectFor records that we wrote the content of TrustBundle bundle to the
// target (created or updated it) at resourceVersion rv.
func (e *Expectations) expectFor(bundle string, kind Kind, ns, name, rv string) {
	e.record(kind, ns, name, rv, false, bundle)
}

// expectGone records that we deleted the target, which the cache held;
// rv is a resourceVersion the delete's event carries at least.
func (e *Expectations) expectGone(kind Kind, ns, name, rv string) {
	e.record(kind, ns, name, rv, true, "")
}

func (e *Expectations) record(kind Kind, ns, name, rv string, gone bool, bundle string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return // an opaque resourceVersion cannot be ordered: trust the cache
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending == nil {
		e.pending = map[expectationKey]expectation{}
	}
	e.pending[expectationKey{kind, ns, name}] = expectation{rv: n, at: e.clock(), gone: gone, bundle: bundle}
}

// clock returns the current time (e.now, or time.Now in the zero value).
func (e *Expectations) clock() time.Time {
	if e.now != nil {
		return e.now()
	}
	return time.Now()
}

// writing returns the targets of kind whose last write of ours put the
// content of TrustBundle bundle in them and may not be in the cache yet:
// a release of bundle's targets that lists the cache would miss them (a
// create) or see them as they were before (an update). Each is still to
// be checked against the cache with satisfied.
func (e *Expectations) writing(kind Kind, bundle string) []client.ObjectKey {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []client.ObjectKey
	for k, exp := range e.pending {
		if k.kind == kind && exp.bundle == bundle && bundle != "" {
			out = append(out, client.ObjectKey{Namespace: k.namespace, Name: k.name})
		}
	}
	return out
}

// satisfied reports whether no write of ours to the target is in flight,
// given the resourceVersion the cache holds ("" when it holds none). When
// one is, the caller must not act on the cache for this target. Checking
// the cached version here, not only in Observe, covers a watch event that
// arrived before the write returned and was recorded.
func (e *Expectations) satisfied(kind Kind, ns, name, cachedRV string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := expectationKey{kind, ns, name}
	exp, ok := e.pending[key]
	if !ok {
		return true
	}
	n, err := strconv.ParseUint(cachedRV, 10, 64)
	if (err == nil && n >= exp.rv) || (exp.gone && cachedRV == "") || e.clock().Sub(exp.at) > expectationTTL {
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
	key := expectationKey{kind, obj.GetNamespace(), obj.GetName()}
	exp, ok := e.pending[key]
	if ok && (err != nil || n >= exp.rv) {
		delete(e.pending, key)
	}
}

// errWriteNotSeen fails the release of a target whose last write of ours
// put a TrustBundle's content in it and is not in the cache yet: what the
// cache shows misses that write, so releasing it now could leave the
// target behind. The failure is retried; by then the cache shows it.
var errWriteNotSeen = errors.New("a write of ours to it is not in the cache yet, so it cannot be released yet")

// unseenWrites fails, in the report, every target of kind (gvk) among
// keys (see Expectations.writing) that e still expects a write of ours to,
// given the resourceVersion cache holds now; it also returns them as a
// set, so that the caller does not release them from what the cache shows.
func unseenWrites(ctx context.Context, cache client.Reader, e *Expectations, kind Kind, gvk schema.GroupVersionKind,
	keys []client.ObjectKey) (Report, map[client.ObjectKey]bool) {
	var rep Report
	unseen := map[client.ObjectKey]bool{}
	for _, k := range keys {
		what := fmt.Sprintf("release %s %s/%s", kind, k.Namespace, k.Name)
		if k.Namespace == "" {
			what = fmt.Sprintf("release %s %s", kind, k.Name)
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		if err := cache.Get(ctx, k, m); err != nil && !apierrors.IsNotFound(err) {
			unseen[k] = true
			rep.Fail(what, fmt.Errorf("read the cache: %w", err))
			continue
		}
		if !e.satisfied(kind, k.Namespace, k.Name, m.ResourceVersion) {
			unseen[k] = true
			rep.Fail(what, errWriteNotSeen)
		}
	}
	return rep, unseen
}
