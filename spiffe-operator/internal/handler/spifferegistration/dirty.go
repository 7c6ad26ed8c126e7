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
// A policy with nothing recorded gets a full pass (first pass, resync, retry),
// unless its pass serves events only (controller.PassServesEvents): an
// earlier pass then took what those events recorded.
// It is safe for concurrent use; a nil Dirty records nothing.
type Dirty struct {
	mu       sync.Mutex
	byPolicy map[string]*dirtySet
}

type dirtySet struct {
	all bool
	changes
}

// changes are what an incremental pass re-examines: workloads, the
// service accounts whose pods changed (what a policy whose entries follow
// pods, with per-node parents or per-pod entries, must look at again), and
// whether the entries the policy keeps for running pods must be judged
// again (entrysync.Syncer.PodsChanged).
type changes struct {
	workloads map[workloadKey]struct{}
	accounts  map[accountKey]struct{}
	kept      bool
}

// accountKey is one service account of one namespace.
type accountKey struct {
	namespace, serviceAccount string
}

func (c changes) size() int {
	n := len(c.workloads) + len(c.accounts)
	if c.kept {
		n++
	}
	return n
}

// NewDirty returns an empty Dirty.
func NewDirty() *Dirty {
	return &Dirty{byPolicy: map[string]*dirtySet{}}
}

// Workload records a change of one workload for policy.
func (d *Dirty) Workload(policy string, kind v1alpha1.WorkloadKind, namespace, name string) {
	d.record(policy, func(c *changes) { c.workloads[workloadKey{kind: kind, namespace: namespace, name: name}] = struct{}{} })
}

// Account records, for policy, a change of the pods that run as
// serviceAccount in namespace (created, deleted, relabelled, bound to a
// node, finished).
func (d *Dirty) Account(policy, namespace, serviceAccount string) {
	d.record(policy, func(c *changes) {
		c.accounts[accountKey{namespace: namespace, serviceAccount: serviceAccount}] = struct{}{}
	})
}

// Kept records, for policy, that pods changed in a namespace where it keeps
// entries for running pods: its next pass, incremental or full, judges
// those entries again.
func (d *Dirty) Kept(policy string) {
	d.record(policy, func(c *changes) { c.kept = true })
}

// record adds one change for policy with add, unless a full pass is
// already asked for; past maxDirty changes it asks for one instead.
func (d *Dirty) record(policy string, add func(*changes)) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.set(policy)
	if s.all {
		return
	}
	if s.size() >= maxDirty {
		s.all, s.changes = true, changes{}
		return
	}
	add(&s.changes)
}

// All asks for a full pass of policy.
func (d *Dirty) All(policy string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.set(policy)
	s.all, s.changes = true, changes{}
}

func (d *Dirty) set(policy string) *dirtySet {
	s := d.byPolicy[policy]
	if s == nil {
		s = &dirtySet{changes: changes{workloads: map[workloadKey]struct{}{}, accounts: map[accountKey]struct{}{}}}
		d.byPolicy[policy] = s
	}
	return s
}

// take returns and clears what was recorded for policy: the changes, and
// whether a full pass was asked for (always, for a nil Dirty). recorded is
// false when nothing was.
func (d *Dirty) take(policy string) (changed changes, all, recorded bool) {
	if d == nil {
		return changes{}, true, true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.byPolicy[policy]
	delete(d.byPolicy, policy)
	switch {
	case s == nil || !s.all && s.size() == 0:
		return changes{}, false, false
	case s.all:
		return changes{}, true, true
	}
	return s.changes, false, true
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
