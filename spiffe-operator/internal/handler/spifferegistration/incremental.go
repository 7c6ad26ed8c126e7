package spifferegistration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// result is what the last sync achieved for one desired entry.
type result uint8

const (
	resultNone result = iota
	resultRegistered
	resultMasked
	resultFailed
)

// outcome is what the last sync made of one entry handed to the Syncer.
type outcome struct {
	result  result
	failure *v1alpha1.Failure
}

// keyState is one desired entry of a policy: the workloads that render it
// and what the Syncer last made of it.
type keyState struct {
	// members are the renders of the workloads that need this entry.
	members []*rendered
	// account is the namespace and service account the entry selects.
	account accountKey
	// want is the merged entry last handed to the Syncer, or, for a
	// policy whose entries follow pods, last expanded.
	want *entries.Entry
	// outcome is the Syncer's, for a policy whose entries do not follow
	// pods (their outcomes are in policyRenders.derived).
	outcome
	// derived are, for a policy whose entries follow pods, the entries want
	// expanded to in the last sync: one per node that runs its pods, or
	// one per pod.
	derived []*entries.Entry
}

// accountOf is the namespace and service account e selects.
func accountOf(e *entries.Entry) accountKey {
	sh, _ := entries.ShapeOf(e)
	return accountKey{namespace: sh.Namespace, serviceAccount: sh.ServiceAccount}
}

// rebuild derives the per-entry state from a full pass that synced without
// error: bases are the merged renders, groups (when followsPods) what each
// expanded to by its pods, and out what the Syncer made of what was synced.
func (m *policyRenders) rebuild(bases []*entries.Entry, groups [][]*entries.Entry, followsPods bool, out *entrysync.Outcome) {
	m.keys = make(map[entries.Key]*keyState, len(bases))
	m.byAccount = map[accountKey]*keySet{}
	m.followsPods, m.derived = followsPods, nil
	if followsPods {
		m.derived = map[entries.Key]*outcome{}
	}
	m.renderFailed = map[workloadKey]struct{}{}
	m.spireFailed = map[entries.Key]struct{}{}
	m.registered, m.masked = 0, 0
	for i, e := range bases {
		ks := &keyState{want: e, account: accountOf(e)}
		if followsPods {
			ks.derived = groups[i]
			for _, d := range ks.derived {
				m.derived[d.Key()] = &outcome{}
			}
		}
		m.keys[e.Key()] = ks
		m.index(e.Key(), ks)
	}
	for wk, r := range m.byWorkload {
		if r.failure != nil {
			m.renderFailed[wk] = struct{}{}
		}
		if e := r.wanted(); e != nil {
			if ks := m.keys[e.Key()]; ks != nil {
				ks.members = append(ks.members, r)
			}
		}
	}
	m.apply(out)
	// Entries held back for a refused replacement are in no render: only a
	// full pass sees them again.
	m.ready = out.HeldBack == 0
}

// index and unindex keep byAccount in step with keys.
func (m *policyRenders) index(k entries.Key, ks *keyState) {
	set := m.byAccount[ks.account]
	if set == nil {
		set = &keySet{}
		m.byAccount[ks.account] = set
	}
	set.add(k)
}

func (m *policyRenders) unindex(k entries.Key, ks *keyState) {
	if set := m.byAccount[ks.account]; set != nil {
		set.remove(k)
		if set.len() == 0 {
			delete(m.byAccount, ks.account)
		}
	}
}

// desired counts the entries the policy wants in SPIRE.
func (m *policyRenders) desired() int {
	if m.followsPods {
		return len(m.derived)
	}
	return len(m.keys)
}

// outcomeOf returns the outcome of the synced entry with key k (nil when
// the policy does not want it).
func (m *policyRenders) outcomeOf(k entries.Key) *outcome {
	if m.followsPods {
		return m.derived[k]
	}
	if ks := m.keys[k]; ks != nil {
		return &ks.outcome
	}
	return nil
}

// apply records the results of a sync of the keys it reports on.
func (m *policyRenders) apply(out *entrysync.Outcome) {
	for k := range out.Registered {
		m.setResult(k, resultRegistered, nil)
	}
	for i := range out.Masked {
		m.setResult(out.Masked[i].Entry.Key(), resultMasked, nil)
	}
	for i := range out.Failed {
		f := &out.Failed[i]
		m.setResult(f.Entry.Key(), resultFailed,
			&v1alpha1.Failure{Object: f.Entry.SpiffeID.String(), Reason: f.Reason, Message: f.Message})
	}
}

func (m *policyRenders) setResult(k entries.Key, r result, f *v1alpha1.Failure) {
	o := m.outcomeOf(k)
	if o == nil {
		return
	}
	m.clearResult(k, o)
	o.result, o.failure = r, f
	switch r {
	case resultRegistered:
		m.registered++
	case resultMasked:
		m.masked++
	case resultFailed:
		m.spireFailed[k] = struct{}{}
	}
}

func (m *policyRenders) clearResult(k entries.Key, o *outcome) {
	if o == nil {
		return
	}
	switch o.result {
	case resultRegistered:
		m.registered--
	case resultMasked:
		m.masked--
	case resultFailed:
		delete(m.spireFailed, k)
	}
	o.result, o.failure = resultNone, nil
}

// detach removes the render r of workload wk from the per-entry state.
func (m *policyRenders) detach(wk workloadKey, r *rendered, touched map[entries.Key]struct{}) {
	if r.failure != nil {
		delete(m.renderFailed, wk)
	}
	e := r.wanted()
	if e == nil {
		return
	}
	k := e.Key()
	ks := m.keys[k]
	if ks == nil {
		return
	}
	for i, x := range ks.members {
		if x == r {
			last := len(ks.members) - 1
			ks.members[i] = ks.members[last]
			ks.members[last] = nil
			ks.members = ks.members[:last]
			break
		}
	}
	touched[k] = struct{}{}
}

// attach adds the render r of workload wk to the per-entry state.
func (m *policyRenders) attach(wk workloadKey, r *rendered, touched map[entries.Key]struct{}) {
	if r.failure != nil {
		m.renderFailed[wk] = struct{}{}
	}
	e := r.wanted()
	if e == nil {
		return
	}
	k := e.Key()
	ks := m.keys[k]
	if ks == nil {
		ks = &keyState{account: accountOf(e)}
		m.keys[k] = ks
		m.index(k, ks)
	}
	ks.members = append(ks.members, r)
	touched[k] = struct{}{}
}

// merged folds the members' renders into one entry, as merge does.
func (ks *keyState) merged() *entries.Entry {
	in := make([]*entries.Entry, len(ks.members))
	for i, r := range ks.members {
		in[i] = r.wanted()
	}
	return merge(in)[0]
}

// failures lists the policy's current failures.
func (m *policyRenders) failures() []v1alpha1.Failure {
	out := make([]v1alpha1.Failure, 0, len(m.renderFailed)+len(m.spireFailed))
	for wk := range m.renderFailed {
		if r := m.byWorkload[wk]; r != nil && r.failure != nil {
			out = append(out, *r.failure)
		}
	}
	for k := range m.spireFailed {
		if o := m.outcomeOf(k); o != nil && o.failure != nil {
			out = append(out, *o.failure)
		}
	}
	return out
}

// incremental re-renders only the changed workloads and syncs only the
// entries they touch. fullReason is not empty when it cannot serve the
// pass (the caller then runs a full pass, for that reason); memo stays
// consistent either way.
func (h *Handler) incremental(ctx context.Context, obj *v1alpha1.SpiffeRegistration, p *policy, m *policyRenders,
	changed changes) (fullReason string, err error) {
	getter, ok := h.getter()
	if !ok {
		return ReasonNoGetter, nil
	}
	namespaces := map[string]*corev1.Namespace{}
	touched := map[entries.Key]struct{}{}
	for wk := range changed.workloads {
		nsObj, seen := namespaces[wk.namespace]
		if !seen {
			nsObj = &corev1.Namespace{}
			if err := h.Reader.Get(ctx, client.ObjectKey{Name: wk.namespace}, nsObj); err != nil {
				if !apierrors.IsNotFound(err) {
					m.ready = false
					return "", fmt.Errorf("get namespace %s: %w", wk.namespace, err)
				}
				nsObj = nil
			}
			namespaces[wk.namespace] = nsObj
		}
		cur, found, err := getter.Get(ctx, wk.kind, wk.namespace, wk.name)
		if err != nil {
			m.ready = false
			return "", fmt.Errorf("select workloads: %w", err)
		}
		old := m.byWorkload[wk]
		var nr *rendered
		if found && workload.Selects(p.selection, wk.kind, nsObj, cur) {
			w, _ := workload.FromObject(cur)
			if old != nil && w.ResourceVersion != "" && old.resourceVersion == w.ResourceVersion {
				continue
			}
			nr = newRender(p, w, old, m.pass)
		}
		if old != nil {
			m.detach(wk, old, touched)
			delete(m.byWorkload, wk)
		}
		if nr != nil {
			m.byWorkload[wk] = nr
			m.attach(wk, nr, touched)
		}
	}
	h.publishFailed(ctx, obj, m, m.mayHaveFailed(), refusedOf(p, m.refused), true)

	var want, gone []*entries.Entry
	if m.followsPods {
		for a := range changed.accounts {
			for k := range m.byAccount[a].all() {
				touched[k] = struct{}{}
			}
		}
		var full bool
		if want, gone, full, err = h.expandTouched(ctx, p, m, touched); err != nil || full {
			m.ready = false
			if err != nil {
				return "", err
			}
			return ReasonNodeParent, nil
		}
	} else {
		for k := range touched {
			ks := m.keys[k]
			if len(ks.members) == 0 {
				if ks.want != nil {
					gone = append(gone, ks.want)
				}
				m.clearResult(k, &ks.outcome)
				m.unindex(k, ks)
				delete(m.keys, k)
				continue
			}
			e := ks.merged()
			if ks.want != nil && entries.UpdateMask(e, ks.want) == nil && ks.result != resultFailed {
				continue
			}
			ks.want = e
			want = append(want, e)
		}
	}

	owner := h.ownerFor(obj, p)
	var out entrysync.Outcome
	if len(want)+len(gone) > 0 || changed.kept {
		// With no other change, SyncDelta only judges again the entries
		// kept for pods (entrysync.Syncer.PodsChanged).
		var syncErr error
		out, syncErr = h.Syncer.SyncDelta(ctx, owner, want, gone)
		if errors.Is(syncErr, entrysync.ErrNeedFullSync) {
			m.ready = false
			return ReasonViewDue, nil
		}
		if syncErr != nil {
			m.ready = false
			obj.Status.ParentIDs = h.Syncer.HeldParentsAfter(owner, obj.Status.ParentIDs, append(parentsOf(want, gone), out.Rechecked...), true)
			return "", SpireError(syncErr)
		}
		for _, e := range want {
			m.clearResult(e.Key(), m.outcomeOf(e.Key()))
		}
		m.apply(&out)
		if !maps.Equal(m.spireFailed, m.refused) {
			m.refused = maps.Clone(m.spireFailed)
			h.publishFailed(ctx, obj, m, m.mayHaveFailed(), refusedOf(p, m.refused), false)
		}
		if out.HeldBack > 0 {
			m.ready = false // as in rebuild: only a full pass sees them again
		}
	}
	// Pods come to nodes and leave them, and an entry refused before may be
	// created now: the parents held change. A pass that wrote nothing may
	// find a parent missing from the record (its status write was refused
	// after an earlier pass's write to SPIRE), and records it.
	parents := h.Syncer.HeldParentsAfter(owner, obj.Status.ParentIDs, append(parentsOf(want, gone), out.Rechecked...), false)
	kept := m.keptEntries(maps.Keys(m.renderFailed), obj.Status.KeptEntries)
	if slices.Equal(parents, obj.Status.ParentIDs) && equality.Semantic.DeepEqual(kept, obj.Status.KeptEntries) {
		// The parents held are as recorded, whether this pass wrote under
		// them or wrote nothing: the status changes by counts and
		// conditions only, so a pass that an event starts soon (the next
		// workload's, or its pod's, come while this pass ran) may write it.
		// A changed record of kept entries is written at once: a restart
		// before it lands would lose it.
		controller.StatusMayWait(ctx)
	}
	obj.Status.ParentIDs = parents
	return "", h.report(ctx, obj, owner, counts{
		selected: len(m.byWorkload), desired: m.desired(), registered: m.registered, masked: m.masked,
		spireFailed: len(m.spireFailed), retained: out.Retained, talked: out.Talked, synced: &m.synced,
		kept: kept,
	}, m.failures(), nil)
}

// lister returns the Handler's workload lister: Lister, or a
// workload.ReaderLister on Reader when it is nil.
func (h *Handler) lister() workload.Lister {
	if h.Lister != nil {
		return h.Lister
	}
	return workload.ReaderLister{Reader: h.Reader}
}

// getter returns the workload lister as a workload.Getter, if it is one:
// incremental passes read the changed workloads one by one.
func (h *Handler) getter() (workload.Getter, bool) {
	g, ok := h.lister().(workload.Getter)
	return g, ok
}

// expandTouched expands again the touched entries of a policy whose
// entries follow pods, from the pods that run now, and returns what to
// create or update and what is no longer wanted. full is true when a node's
// parent ID failed to render: only a full pass reports those.
func (h *Handler) expandTouched(ctx context.Context, p *policy, m *policyRenders, touched map[entries.Key]struct{}) (
	want, gone []*entries.Entry, full bool, err error) {
	nodes := h.nodeParents(p)
	for k := range touched {
		ks := m.keys[k]
		var next []*entries.Entry
		if len(ks.members) > 0 {
			ks.want = ks.merged()
			if next, err = h.expand(ctx, p, nodes, ks.want); err != nil {
				return nil, nil, false, err
			}
		}
		prev := make(map[entries.Key]*entries.Entry, len(ks.derived))
		for _, d := range ks.derived {
			prev[d.Key()] = d
		}
		for _, d := range next {
			dk := d.Key()
			if old, ok := prev[dk]; ok {
				delete(prev, dk)
				// Unchanged: nothing to write, unless SPIRE refused it
				// last time (a pass that concerns it tries again).
				if o := m.derived[dk]; entries.UpdateMask(d, old) == nil && (o == nil || o.result != resultFailed) {
					continue
				}
			} else {
				m.derived[dk] = &outcome{}
			}
			want = append(want, d)
		}
		for dk, d := range prev {
			gone = append(gone, d)
			m.clearResult(dk, m.derived[dk])
			delete(m.derived, dk)
		}
		ks.derived = next
		if len(ks.members) == 0 {
			m.unindex(k, ks)
			delete(m.keys, k)
		}
	}
	return want, gone, len(nodes.failures) > 0, nil
}

// parentsOf lists the distinct parent IDs of the entries.
func parentsOf(lists ...[]*entries.Entry) []spiffeid.ID {
	seen := map[spiffeid.ID]struct{}{}
	var out []spiffeid.ID
	for _, l := range lists {
		for _, e := range l {
			if _, ok := seen[e.ParentID]; !ok {
				seen[e.ParentID] = struct{}{}
				out = append(out, e.ParentID)
			}
		}
	}
	return out
}
