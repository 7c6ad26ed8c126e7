package spifferegistration

import (
	"fmt"
	"iter"
	"maps"
	"sync"
	"time"

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
	// failed are, per policy, the workloads its last pass found failing
	// (policyRenders.failedOf), for the fallback policies' passes. A
	// published set is never changed.
	failed map[k8stypes.UID]map[workloadKey]failedWorkload
}

type policyRenders struct {
	generation int64
	pass       uint64
	byWorkload map[workloadKey]*rendered
	// previous are the renders of the policy's previous generation, until
	// the first pass of this one: a workload whose render now fails keeps
	// the entry it rendered to before.
	previous map[workloadKey]*rendered
	// recorded are the last good entries the policy's status recorded
	// (status.keptEntries) when this process first met the policy, until
	// its first full pass: after a restart, a workload whose render fails
	// keeps the entry recorded for it (same UID) as its last good.
	recorded map[workloadKey]keptRecord
	// dropped names the records the policy could not have rendered for
	// their workload, left out since the last time a pass logged them.
	dropped []string
	// current is what the template renders now in the namespaces of the
	// records SPIRE holds, while they are to be judged
	// (heldRecordNamespaces): one whose SPIFFE ID it gives another
	// workload is not the workload's.
	current *currentIDs

	// ready is true when the fields below describe SPIRE's state after the
	// last pass, so the next pass may be an incremental one.
	ready bool
	// keys holds the desired entries by key (for a policy whose entries
	// follow pods, before they are expanded by the pods).
	keys map[entries.Key]*keyState
	// byAccount indexes keys by the namespace and service account their
	// entries select, for passes that follow pod changes.
	byAccount map[accountKey]*keySet
	// followsPods is true for a policy with per-node parents or per-pod
	// entries: what SPIRE holds is keys expanded by the pods that run, and
	// derived holds the outcomes of those entries by key.
	followsPods bool
	derived     map[entries.Key]*outcome
	// renderFailed are the workloads whose render failed.
	renderFailed map[workloadKey]struct{}
	// spireFailed are the desired entries SPIRE refused.
	spireFailed map[entries.Key]struct{}
	// registered and masked count the desired entries in those states.
	registered, masked int
	// refused are the keys of the desired entries SPIRE refused at the last
	// pass that synced, for publishFailed (spireFailed holds them only
	// while the per-entry state is kept, which autoPopulateDNSNames
	// policies do not keep).
	refused map[entries.Key]struct{}
	// wanted are, for a fallback policy, the keys of the entries its last
	// full pass wanted, when that pass synced without error (nil during a
	// pass, and after one that failed).
	wanted map[entries.Key]struct{}
	// synced is when a pass of this policy last read from or wrote to
	// SPIRE without error (zero when none has since the operator started).
	// A pass that does not talk to SPIRE reports it: the status of the
	// pass that talked may have been held back and replaced by a later
	// pass's (controller.StatusMayWait), and must not take lastSyncTime
	// back with it.
	synced time.Time
}

type workloadKey struct {
	kind      v1alpha1.WorkloadKind
	namespace string
	name      string
}

// keyOf is w's key.
func keyOf(w workload.Workload) workloadKey {
	return workloadKey{kind: w.Kind, namespace: w.Namespace, name: w.Name}
}

type rendered struct {
	// wk is the workload rendered.
	wk              workloadKey
	resourceVersion string
	entry           entries.Entry
	failure         *v1alpha1.Failure
	// lastGood is, when the render failed, the entry the workload's last
	// successful render wanted (nil if none): a render error must not take
	// away an identity the workload has.
	lastGood *entries.Entry
	// uid is the workload's UID: a last good entry passes only to a
	// render of the same workload, not to one re-created under its name.
	uid  k8stypes.UID
	pass uint64
}

// wanted returns the entry the workload needs: what it renders to, or
// after a failed render its last good entry (nil when it never had one).
func (r *rendered) wanted() *entries.Entry {
	if r.failure == nil {
		return &r.entry
	}
	return r.lastGood
}

// newRender records what p renders for w; a failed render keeps the entry
// prev (the workload's previous render, or nil) wanted when prev is a
// render of the same workload (its UID), under p's parent (with per-node
// parents, each node's), with no grant p no longer makes
// (entries.Entry.Within), and with p's lifetimes and hint.
func newRender(p *policy, w workload.Workload, prev *rendered, pass uint64) *rendered {
	e, f := p.render(w)
	r := &rendered{wk: keyOf(w), resourceVersion: w.ResourceVersion, entry: e, failure: f, pass: pass, uid: w.UID}
	if f != nil && prev != nil && prev.uid == w.UID {
		if last := prev.wanted(); last != nil {
			kept := last.Within(p.grants())
			kept.ParentID = p.parentID
			// The options that are the policy's alone follow it: a
			// workload that stops rendering keeps its identity, not a
			// lifetime or hint the policy has changed since.
			kept.X509SVIDTTL, kept.JWTSVIDTTL, kept.Hint = p.x509TTL, p.jwtTTL, p.hint
			kept.Normalize()
			r.lastGood = &kept
		}
	}
	return r
}

// forPolicy returns the memo of policy uid at generation gen; the caller
// holds it for the pass (policies are reconciled one pass at a time). A
// memo made for a policy this process has not met holds recorded, the
// last good entries its status records. recorded, which may ask SPIRE,
// runs without the lock every policy's pass takes here.
func (r *renders) forPolicy(uid k8stypes.UID, gen int64, recorded func() map[workloadKey]keptRecord) *policyRenders {
	r.mu.Lock()
	_, known := r.byPolicy[uid]
	r.mu.Unlock()
	var records map[workloadKey]keptRecord
	if !known {
		records = recorded()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byPolicy == nil {
		r.byPolicy = map[k8stypes.UID]*policyRenders{}
	}
	m := r.byPolicy[uid]
	if m == nil || m.generation != gen {
		next := &policyRenders{generation: gen, byWorkload: map[workloadKey]*rendered{}}
		if m != nil {
			next.previous = m.byWorkload
			next.synced = m.synced
			next.refused = m.refused
			next.recorded = m.recorded
		} else {
			// A policy's passes run one at a time, so only a forget
			// between the two locks leaves it unread.
			if known {
				records = recorded()
			}
			next.recorded = records
		}
		m = next
		r.byPolicy[uid] = m
	}
	return m
}

// forget drops the memo of policy uid.
func (r *renders) forget(uid k8stypes.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byPolicy, uid)
	delete(r.failed, uid)
}

// failedWorkload is how a workload failed in a policy's pass: its render
// failed, and it keeps the last good entry of the workload of UID uid
// (kept) or none; or SPIRE refused its entry (refused). wide is true when
// the entry it keeps has no pod-label selectors: it selects every pod of
// its namespace and service account, whatever the policy's template is
// now.
type failedWorkload struct {
	kept, refused, wide bool
	uid                 k8stypes.UID
}

// publishFailed records failed as the failing workloads of policy uid, and
// reports whether that changed what was recorded (or none was recorded
// since the process started and failed is not empty). Before a pass has
// SPIRE's answer (beforeSync), a workload recorded as refused stays so:
// only SPIRE says it takes the workload's entry now (after an edit of
// the policy, or of the workload, that changed the entry, say).
func (r *renders) publishFailed(uid k8stypes.UID, failed map[workloadKey]failedWorkload, beforeSync bool) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == nil {
		r.failed = map[k8stypes.UID]map[workloadKey]failedWorkload{}
	}
	prev, known := r.failed[uid]
	if beforeSync {
		for k, f := range prev {
			if nf, ok := failed[k]; f.refused && (!ok || !nf.refused) {
				if failed == nil {
					failed = map[workloadKey]failedWorkload{}
				}
				failed[k] = f
			}
		}
	}
	r.failed[uid] = failed
	if !known {
		return len(failed) > 0
	}
	return !maps.Equal(prev, failed)
}

// failedBy returns what publishFailed last recorded for policy uid, and
// whether anything was.
func (r *renders) failedBy(uid k8stypes.UID) (map[workloadKey]failedWorkload, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed, ok := r.failed[uid]
	return failed, ok
}

// failedOf returns the workloads of keys whose render failed, or whose
// entry SPIRE refused (its key is in refused).
func (m *policyRenders) failedOf(keys iter.Seq[workloadKey], refused map[entries.Key]struct{}) map[workloadKey]failedWorkload {
	var out map[workloadKey]failedWorkload
	for k := range keys {
		r := m.byWorkload[k]
		if r == nil {
			continue
		}
		e := r.wanted()
		f := failedWorkload{kept: r.failure != nil && e != nil, uid: r.uid}
		if f.kept {
			f.wide = selectsAllPodsOfAccount(e)
		}
		if e != nil && len(refused) > 0 {
			_, f.refused = refused[e.Key()]
		}
		if r.failure != nil || f.refused {
			if out == nil {
				out = map[workloadKey]failedWorkload{}
			}
			out[k] = f
		}
	}
	return out
}

// mayHaveFailed are the workloads an incremental pass judges for
// failedOf: those whose render failed, and those whose entries SPIRE
// refuses (the members of the refused keys), so its cost follows the
// failures, not the number of workloads.
func (m *policyRenders) mayHaveFailed() iter.Seq[workloadKey] {
	return func(yield func(workloadKey) bool) {
		for wk := range m.renderFailed {
			if !yield(wk) {
				return
			}
		}
		for k := range m.refused {
			if ks := m.keys[k]; ks != nil {
				for _, r := range ks.members {
					if !yield(r.wk) {
						return
					}
				}
			}
		}
	}
}

// render returns the entry w needs under p (nil when none) and its render
// failure, from the memo when w did not change.
func (m *policyRenders) render(p *policy, w workload.Workload) (*entries.Entry, *v1alpha1.Failure) {
	k := keyOf(w)
	r := m.byWorkload[k]
	if r == nil || r.resourceVersion != w.ResourceVersion || w.ResourceVersion == "" {
		prev, _ := m.earlierJudged(p, w)
		r = newRender(p, w, prev, m.pass)
		m.byWorkload[k] = r
	}
	r.pass = m.pass
	return r.wanted(), r.failure
}

// earlier returns w's render before this pass: the memo's, else its
// previous generation's, else (after a start) the last good entry the
// policy's status records for it (fromRecord), as recorded.
func (m *policyRenders) earlier(w workload.Workload) (prev *rendered, fromRecord bool) {
	k := keyOf(w)
	if prev = m.byWorkload[k]; prev != nil {
		return prev, false
	}
	if prev = m.previous[k]; prev != nil {
		return prev, false
	}
	if rec, ok := m.recorded[k]; ok && rec.uid == w.UID {
		return &rendered{entry: rec.entry, uid: rec.uid}, true
	}
	return nil, false
}

// earlierJudged is earlier with a status record judged: the status is no
// proof of what the operator registered, since whoever may write it could
// record any entry. A record that SPIRE does not hold as the policy's, and
// that the policy could not have rendered for w, is dropped (and named).
func (m *policyRenders) earlierJudged(p *policy, w workload.Workload) (prev *rendered, fromRecord bool) {
	prev, fromRecord = m.earlier(w)
	if !fromRecord {
		return prev, false
	}
	k := keyOf(w)
	if err := p.couldHaveKept(m.recorded[k], w, m.current); err != nil {
		delete(m.recorded, k)
		m.dropped = append(m.dropped, fmt.Sprintf("%s: %v", w, err))
		return nil, false
	}
	return prev, true
}

// lastWanted returns the entry the memo gives w without a pass of p
// having rendered it yet: its render now, or after a failed render the
// last good entry of its earlier render, a status record unjudged (nil
// when none). The memo is left as it was.
func (m *policyRenders) lastWanted(p *policy, w workload.Workload) *entries.Entry {
	prev, _ := m.earlier(w)
	return newRender(p, w, prev, m.pass).wanted()
}

// carry keeps w's last good entry in the memo through this pass without
// rendering w again, so a workload a fallback yields keeps it for a later
// pass (and its status records it, as for any failing workload): only a
// render of w (its UID) that failed and kept a last good entry is carried,
// one of this generation, of the previous one, or the status's record of
// one after a restart (rendered again at the next pass, so the policy's
// grants and options now apply). A render that
// succeeded is not carried: the next render gives the same entry, or
// fails without a last good one, as after a restart.
func (m *policyRenders) carry(p *policy, w workload.Workload) {
	k := keyOf(w)
	r, fromRecord := m.earlierJudged(p, w)
	switch {
	case r == nil:
		return
	case fromRecord:
		// A last good entry, not a render: render w with it.
		r = newRender(p, w, r, m.pass)
		r.resourceVersion = ""
	case m.byWorkload[k] != r:
		// Of the previous generation: render it again at the next pass.
		c := *r
		c.resourceVersion = ""
		r = &c
	}
	if r.uid != w.UID || r.failure == nil || r.lastGood == nil {
		return
	}
	r.pass = m.pass
	m.byWorkload[k] = r
}

// heldRecordNamespaces returns the namespaces of the records SPIRE holds
// that the pass is to judge (see current).
func (m *policyRenders) heldRecordNamespaces() map[string]bool {
	var out map[string]bool
	for k, rec := range m.recorded {
		if rec.registered {
			if out == nil {
				out = map[string]bool{}
			}
			out[k.namespace] = true
		}
	}
	return out
}

// begin starts a pass; end drops workloads the pass did not see.
func (m *policyRenders) begin() { m.pass++ }

func (m *policyRenders) end() {
	m.previous = nil
	m.recorded = nil
	m.current = nil
	for k, r := range m.byWorkload {
		if r.pass != m.pass {
			delete(m.byWorkload, k)
		}
	}
}

// selectsAllPodsOfAccount reports whether e selects every pod of its
// namespace and service account: it has no pod-label selectors, or its
// selectors are not all of a pod's shape.
func selectsAllPodsOfAccount(e *entries.Entry) bool {
	sh, ok := entries.ShapeOf(e)
	return !ok || len(sh.Labels) == 0
}
