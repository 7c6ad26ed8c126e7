package spifferegistration

import (
	"sync"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// maxDirty is how many changed workloads a policy collects before its next
// pass becomes a full one (cheaper than that many single renders and diffs).
const maxDirty = 2048

// Dirty records, per policy, which workloads changed since the policy's last
// pass, so that pass renders and diffs only those (an incremental pass)
// rather than every workload the policy selects. Event handlers record a
// change before they enqueue the policy; a change that can concern any
// workload (a namespace, a hand-over of a masked entry) asks for a full pass.
// A policy with nothing recorded gets a full pass (first pass, resync, retry).
// It is safe for concurrent use; a nil Dirty records nothing.
type Dirty struct {
	mu       sync.Mutex
	byPolicy map[string]*dirtySet
}

type dirtySet struct {
	all       bool
	workloads map[workloadKey]struct{}
}

// NewDirty returns an empty Dirty.
func NewDirty() *Dirty {
	return &Dirty{byPolicy: map[string]*dirtySet{}}
}

// Workload records a change of one workload for policy.
func (d *Dirty) Workload(policy string, kind v1alpha1.WorkloadKind, namespace, name string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.set(policy)
	if s.all {
		return
	}
	if len(s.workloads) >= maxDirty {
		s.all, s.workloads = true, nil
		return
	}
	s.workloads[workloadKey{kind: kind, namespace: namespace, name: name}] = struct{}{}
}

// All asks for a full pass of policy.
func (d *Dirty) All(policy string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.set(policy)
	s.all, s.workloads = true, nil
}

func (d *Dirty) set(policy string) *dirtySet {
	s := d.byPolicy[policy]
	if s == nil {
		s = &dirtySet{workloads: map[workloadKey]struct{}{}}
		d.byPolicy[policy] = s
	}
	return s
}

// take returns and clears what was recorded for policy. full is true when
// the next pass must be a full one: asked for, or nothing recorded.
func (d *Dirty) take(policy string) (changed map[workloadKey]struct{}, full bool) {
	if d == nil {
		return nil, true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.byPolicy[policy]
	delete(d.byPolicy, policy)
	if s == nil || s.all || len(s.workloads) == 0 {
		return nil, true
	}
	return s.workloads, false
}

// forget drops what was recorded for policy.
func (d *Dirty) forget(policy string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byPolicy, policy)
}
