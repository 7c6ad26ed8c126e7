package spifferegistration

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// keyState is one desired entry of a policy: the workloads that render it
// and what the Syncer last made of it.
type keyState struct {
	// members are the renders of the workloads that need this entry.
	members []*rendered
	// want is the merged entry last handed to the Syncer.
	want    *entries.Entry
	result  result
	failure *v1alpha1.Failure
}

// rebuild derives the per-entry state from a full pass that synced without
// error: want is what it asked for, out what the Syncer made of it.
func (m *policyRenders) rebuild(want []*entries.Entry, out *entrysync.Outcome) {
	m.keys = make(map[entries.Key]*keyState, len(want))
	m.renderFailed = map[workloadKey]struct{}{}
	m.spireFailed = map[entries.Key]struct{}{}
	m.registered, m.masked = 0, 0
	for _, e := range want {
		m.keys[e.Key()] = &keyState{want: e}
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
	m.ready = true
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
	ks := m.keys[k]
	if ks == nil {
		return
	}
	m.clearResult(k, ks)
	ks.result, ks.failure = r, f
	switch r {
	case resultRegistered:
		m.registered++
	case resultMasked:
		m.masked++
	case resultFailed:
		m.spireFailed[k] = struct{}{}
	}
}

func (m *policyRenders) clearResult(k entries.Key, ks *keyState) {
	switch ks.result {
	case resultRegistered:
		m.registered--
	case resultMasked:
		m.masked--
	case resultFailed:
		delete(m.spireFailed, k)
	}
	ks.result, ks.failure = resultNone, nil
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
		ks = &keyState{}
		m.keys[k] = ks
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
		if ks := m.keys[k]; ks != nil && ks.failure != nil {
			out = append(out, *ks.failure)
		}
	}
	return out
}

// incremental re-renders only the changed workloads and syncs only the
// entries they touch. done is false when it cannot serve the pass (the
// caller then runs a full pass); memo stays consistent either way.
func (h *Handler) incremental(ctx context.Context, obj *v1alpha1.SpiffeRegistration, p *policy, m *policyRenders,
	changed map[workloadKey]struct{}) (done bool, err error) {
	var lister workload.Lister = workload.ReaderLister{Reader: h.Reader}
	if h.Lister != nil {
		lister = h.Lister
	}
	getter, ok := lister.(workload.Getter)
	if !ok {
		return false, nil
	}
	namespaces := map[string]*corev1.Namespace{}
	touched := map[entries.Key]struct{}{}
	for wk := range changed {
		nsObj, seen := namespaces[wk.namespace]
		if !seen {
			nsObj = &corev1.Namespace{}
			if err := h.Reader.Get(ctx, client.ObjectKey{Name: wk.namespace}, nsObj); err != nil {
				if !apierrors.IsNotFound(err) {
					m.ready = false
					return true, fmt.Errorf("get namespace %s: %w", wk.namespace, err)
				}
				nsObj = nil
			}
			namespaces[wk.namespace] = nsObj
		}
		cur, found, err := getter.Get(ctx, wk.kind, wk.namespace, wk.name)
		if err != nil {
			m.ready = false
			return true, fmt.Errorf("select workloads: %w", err)
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

	var want, gone []*entries.Entry
	for k := range touched {
		ks := m.keys[k]
		if len(ks.members) == 0 {
			if ks.want != nil {
				gone = append(gone, ks.want)
			}
			m.clearResult(k, ks)
			delete(m.keys, k)
			continue
		}
		e := ks.merged()
		if ks.want != nil && entries.UpdateMask(e, ks.want) == nil {
			continue
		}
		ks.want = e
		want = append(want, e)
	}

	owner := OwnerOf(obj)
	var out entrysync.Outcome
	if len(want)+len(gone) > 0 {
		var syncErr error
		out, syncErr = h.Syncer.SyncDelta(ctx, owner, want, gone)
		if errors.Is(syncErr, entrysync.ErrNeedFullSync) {
			m.ready = false
			return false, nil
		}
		if syncErr != nil {
			m.ready = false
			return true, SpireError(syncErr)
		}
		for _, e := range want {
			m.clearResult(e.Key(), m.keys[e.Key()])
		}
		m.apply(&out)
	}
	return true, h.report(ctx, obj, owner, counts{
		selected: len(m.byWorkload), desired: len(m.keys), registered: m.registered, masked: m.masked,
		spireFailed: len(m.spireFailed), retained: out.Retained, talked: out.Talked,
	}, m.failures(), nil)
}
