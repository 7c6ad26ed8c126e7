package spifferegistration

import (
	"sync"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// renders remembers, per policy, what each workload rendered to, so an
// event-driven pass only renders the workloads that changed since the last
// pass. A policy's memo is dropped when its generation changes.
type renders struct {
	mu       sync.Mutex
	byPolicy map[k8stypes.UID]*policyRenders
}

type policyRenders struct {
	generation int64
	pass       uint64
	byWorkload map[workloadKey]*rendered

	// ready is true when the fields below describe SPIRE's state after the
	// last pass, so the next pass may be an incremental one.
	ready bool
	// keys holds the desired entries by key.
	keys map[entries.Key]*keyState
	// renderFailed are the workloads whose render failed.
	renderFailed map[workloadKey]struct{}
	// spireFailed are the desired entries SPIRE refused.
	spireFailed map[entries.Key]struct{}
	// registered and masked count the desired entries in those states.
	registered, masked int
}

type workloadKey struct {
	kind      v1alpha1.WorkloadKind
	namespace string
	name      string
}

type rendered struct {
	resourceVersion string
	entry           entries.Entry
	failure         *v1alpha1.Failure
	pass            uint64
}

// forPolicy returns the memo of policy uid at generation gen; the caller
// holds it for the pass (policies are reconciled one pass at a time).
func (r *renders) forPolicy(uid k8stypes.UID, gen int64) *policyRenders {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byPolicy == nil {
		r.byPolicy = map[k8stypes.UID]*policyRenders{}
	}
	m := r.byPolicy[uid]
	if m == nil || m.generation != gen {
		m = &policyRenders{generation: gen, byWorkload: map[workloadKey]*rendered{}}
		r.byPolicy[uid] = m
	}
	return m
}

// forget drops the memo of policy uid.
func (r *renders) forget(uid k8stypes.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byPolicy, uid)
}

// render returns what p renders for w, from the memo when w did not change.
func (m *policyRenders) render(p *policy, w workload.Workload) (*entries.Entry, *v1alpha1.Failure) {
	k := workloadKey{kind: w.Kind, namespace: w.Namespace, name: w.Name}
	r := m.byWorkload[k]
	if r == nil || r.resourceVersion != w.ResourceVersion || w.ResourceVersion == "" {
		e, f := p.render(w)
		r = &rendered{resourceVersion: w.ResourceVersion, entry: e, failure: f}
		m.byWorkload[k] = r
	}
	r.pass = m.pass
	return &r.entry, r.failure
}

// begin starts a pass; end drops workloads the pass did not see.
func (m *policyRenders) begin() { m.pass++ }

func (m *policyRenders) end() {
	for k, r := range m.byWorkload {
		if r.pass != m.pass {
			delete(m.byWorkload, k)
		}
	}
}
