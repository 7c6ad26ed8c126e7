package identitybinding

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// missingPools remembers, by binding key, since when a binding's pool has
// been missing while the binding's outputs stood for its current spec: a
// pool replaced (deleted and made again, its pods kept) must not take the
// identity of the pods that keep running meanwhile.
type missingPools struct {
	mu sync.Mutex
	of map[types.NamespacedName]missingPool
}

// missingPool is one binding's run of passes that found its pool missing.
type missingPool struct {
	uid        types.UID
	generation int64
	since      time.Time
}

// since returns since when b's pool has been missing, starting a run at now
// if none is under way; ok is false when b gets no grace: its outputs do
// not stand for its current spec (it was not Ready at this generation
// when the run would start), or its spec changed since the run started.
func (m *missingPools) since(key types.NamespacedName, b *v1alpha1.IdentityBinding, now time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if run, ok := m.of[key]; ok && run.uid == b.UID {
		return run.since, run.generation == b.Generation
	}
	ready := condition.Find(b, condition.TypeReady)
	if len(b.Status.Outputs) == 0 || ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != b.Generation {
		return time.Time{}, false
	}
	if m.of == nil {
		m.of = map[types.NamespacedName]missingPool{}
	}
	m.of[key] = missingPool{uid: b.UID, generation: b.Generation, since: now}
	return now, true
}

// forget ends the run of key: its pool was found, or the binding is gone.
func (m *missingPools) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.of, key)
}
