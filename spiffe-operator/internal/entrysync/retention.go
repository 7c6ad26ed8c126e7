package entrysync

import (
	"context"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/apimachinery/pkg/labels"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// Pod is what retention reads of an existing pod.
type Pod struct {
	// UID is the pod's UID.
	UID string
	// Labels are the pod's labels.
	Labels labels.Labels
	// Node is the name of the node the pod is bound to; empty while it is
	// not scheduled.
	Node string
}

// PodLister returns every running pod in namespace that runs as
// serviceAccount. It reads a cache and must not block.
type PodLister func(ctx context.Context, namespace, serviceAccount string) ([]Pod, error)

// retention records an entry kept only because pods still run under it.
type retention struct {
	owner     Owner
	namespace string
	// parent is the parent ID the entry is under.
	parent string
}

// retainer decides, for one plan, which of an owner's entries that are no
// longer wanted must stay because an existing pod matches them and nothing
// else the owner wants covers that pod. s.mu is held while it runs.
type retainer struct {
	s     *Syncer
	ctx   context.Context
	owner Owner
	p     *plan
	// cover maps "namespace/serviceAccount" to the entries the owner wants
	// that select pods there: one account at a time, as they are asked
	// for, or every account at once (coverAll) past maxAccountScans.
	cover    map[string][]coverEntry
	coverAll bool
	scans    int
	// parentNodes memoizes owner.NodeOfParent.
	parentNodes map[string]parentNode
	// judged are the IDs of the entries drop judged in this plan.
	judged map[string]bool
}

// parentNode is what Owner.NodeOfParent said of a parent ID.
type parentNode struct {
	node           string
	known, current bool
}

// servedUnder reports whether an entry under parent can serve pod: with
// the owner's entries per node, one under the agent of another node
// cannot (nor can any while the pod is not scheduled); one under a parent
// of no node the owner knows of may (the agent of a node re-created under
// a new UID keeps its old ID until it attests again).
func (r *retainer) servedUnder(pod Pod, parent string) bool {
	if r.owner.NodeOfParent == nil {
		return true
	}
	if pod.Node == "" {
		return false
	}
	pn := r.parentNode(parent)
	return !pn.known || pn.node == pod.Node
}

// parentNode returns what the owner says of parent, once per pass.
func (r *retainer) parentNode(parent string) parentNode {
	pn, ok := r.parentNodes[parent]
	if !ok {
		pn.node, pn.known, pn.current = r.owner.NodeOfParent(r.ctx, parent)
		if r.parentNodes == nil {
			r.parentNodes = map[string]parentNode{}
		}
		r.parentNodes[parent] = pn
	}
	return pn
}

// replaced reports whether parent names the agent of a node deleted or
// re-created under a new UID: that agent may run under it until it
// attests again, so the same identity under another parent does not serve
// its pods.
func (r *retainer) replaced(parent string) bool {
	if r.owner.NodeOfParent == nil {
		return false
	}
	pn := r.parentNode(parent)
	return pn.known && !pn.current
}

// coverEntry is an entry the owner wants, as the retainer judges pods by it.
type coverEntry struct {
	shape  entries.PodShape
	parent string
	// id is the entry's SPIFFE ID.
	id spiffeid.ID
	// creating is true for an entry the plan creates, false for one SPIRE
	// holds.
	creating bool
}

// drop plans the deletion of owner's entry o (ID id, under parent), which
// the owner no longer wants, unless a pod still needs it.
func (r *retainer) drop(parent, id string, o *ours, out *Outcome) {
	if r.judged == nil {
		r.judged = map[string]bool{}
	}
	r.judged[id] = true
	if r.keep(parent, id, o) {
		out.Retained++
		return
	}
	r.p.stale = append(r.p.stale, deletion{parent: parent, id: id})
}

// keep reports whether the stale entry o (ID id, under parent) must stay,
// and records it. An entry that stays is trimmed of every grant the owner
// no longer makes: the pods keep their identity, not a withdrawn right.
// Only the pods that needed the entry when this process first found it no
// longer wanted count, and only while they still match it: a pod started or
// relabelled later, by anyone who may do so in the namespace, must not keep
// an identity the owner withdrew alive for ever.
func (r *retainer) keep(parent, id string, o *ours) bool {
	if r.s.opts.Pods == nil {
		return false
	}
	sh, ok := entries.ShapeOf(&o.entry)
	if !ok {
		return false
	}
	pods, err := r.s.opts.Pods(r.ctx, sh.Namespace, sh.ServiceAccount)
	if err != nil {
		// Not knowing which pods run, keep the entry: the next pass decides.
		logf.FromContext(r.ctx).Error(err, "reading pods; keeping an entry no longer wanted", "entryID", id)
		r.retain(parent, id, o, sh.Namespace)
		return true
	}
	needs, recorded := r.s.withdrawn[id]
	if !recorded {
		needs = map[string]bool{}
	}
	kept := false
	for _, pod := range pods {
		if !sh.MatchesPod(pod.UID, pod.Labels) || !r.servedUnder(pod, parent) {
			continue
		}
		var moved spiffeid.ID
		if r.replaced(parent) {
			moved = o.entry.SpiffeID
		}
		existing, here, creating := r.covers(sh, pod, parent, moved)
		if !recorded && !here {
			// The pod depends on this entry unless an existing entry
			// under the same parent serves it; one that only entries
			// being created (or under other parents) serve counts, in
			// case they never land.
			needs[pod.UID] = true
		}
		if needs[pod.UID] && !existing && !creating {
			kept = true
		}
	}
	if !recorded {
		r.s.withdrawn[id] = needs
	}
	if kept {
		r.retain(parent, id, o, sh.Namespace)
	}
	return kept
}

// retain records that the owner's entry o (ID id, under parent) stays for
// pods in namespace, and plans the withdrawal of any grant the owner no
// longer makes from it.
func (r *retainer) retain(parent, id string, o *ours, namespace string) {
	r.s.retained[id] = retention{owner: r.owner.bare(), namespace: namespace, parent: parent}
	if u, ok := trimmed(&o.entry, id, r.owner.Grants); ok {
		r.p.updates = append(r.p.updates, u)
	}
}

// covers reports whether an entry the owner wants that SPIRE holds serves
// the pod (existing), whether one under parent does (here), and whether an
// entry the plan creates does (creating), where the pod is one that an
// entry of shape stale (no longer wanted) selects. A wanted entry serves
// the pod when its shape matches the pod, its parent can serve the pod's
// node (see servedUnder), and it narrows by no container, image, owner or
// node selector that stale does not also ask: the pod cache cannot tell
// whether the pod meets such a selector, so an entry that adds one is no
// proof that the pod keeps an identity without stale. An entry of the
// SPIFFE ID moved (unless zero) counts only under parent: the identity
// moved to the new parent of a replaced node, whose agent may not have it
// yet.
func (r *retainer) covers(stale entries.PodShape, pod Pod, parent string, moved spiffeid.ID) (existing, here, creating bool) {
	for _, c := range r.coverOf(stale.Namespace, stale.ServiceAccount) {
		if !c.shape.MatchesPod(pod.UID, pod.Labels) || !c.shape.NarrowsNoMoreThan(stale) || !r.servedUnder(pod, c.parent) ||
			!moved.IsZero() && c.id == moved && c.parent != parent {
			continue
		}
		if c.creating {
			creating = true
		} else {
			existing = true
			here = here || c.parent == parent
		}
		if here && creating {
			break
		}
	}
	return existing, here, creating
}

// maxAccountScans is how many accounts a retainer gathers the cover of one
// by one, each with a walk through the views that allocates nothing but
// for the entries of that account; past it, it gathers every account's in
// one walk. So judging the entries of one account allocates as much
// whatever the owners hold, and a full plan that keeps entries in many
// accounts walks the views a few times at most.
const maxAccountScans = 4

// coverOf returns the entries the owner wants that select pods of
// serviceAccount in namespace (see covers).
func (r *retainer) coverOf(namespace, serviceAccount string) []coverEntry {
	k := namespace + "/" + serviceAccount
	if c, ok := r.cover[k]; ok || r.coverAll {
		return c
	}
	if r.cover == nil {
		r.cover = map[string][]coverEntry{}
	}
	if r.scans == maxAccountScans {
		r.coverAll = true
		r.gather(nil)
		return r.cover[k]
	}
	r.scans++
	r.cover[k] = nil
	r.gather(&account{namespace: namespace, serviceAccount: serviceAccount})
	return r.cover[k]
}

// account is a namespace and a service account.
type account struct {
	namespace, serviceAccount string
}

// names reports whether e names a (see entries.AccountParts); nil names
// every entry.
func (a *account) names(e *entries.Entry) bool {
	if a == nil {
		return true
	}
	ns, sa, ok := entries.AccountParts(e)
	return ok && ns == a.namespace && sa == a.serviceAccount
}

// gather adds to r.cover the entries the owner wants that name only (nil:
// every entry): those the plan creates, and those the owner claims that
// SPIRE holds (ours or another owner's), but for those the plan takes
// over: it deletes them before anything it creates lands, and SPIRE may
// refuse what replaces them.
func (r *retainer) gather(only *account) {
	add := func(e *entries.Entry, creating bool) {
		if sh, ok := entries.ShapeOf(e); ok {
			k := sh.Namespace + "/" + sh.ServiceAccount
			r.cover[k] = append(r.cover[k], coverEntry{shape: sh, parent: e.ParentID.String(), id: e.SpiffeID, creating: creating})
		}
	}
	for _, e := range r.p.creates {
		if only.names(e) {
			add(e, true)
		}
	}
	claimed := r.s.claims.byOwner[r.owner.UID]
	taken := make(map[string]bool, len(r.p.takeovers))
	for _, d := range r.p.takeovers {
		taken[d.id] = true
	}
	for _, v := range r.s.views {
		for id, o := range v.ours {
			if !only.names(&o.entry) {
				continue
			}
			k := o.entry.Key()
			if _, ok := claimed[k]; ok && v.byKey[k] == id && !taken[id] {
				add(&o.entry, false)
			}
		}
	}
}

// forgetRetained drops the retention records of owner, and the namespaces
// whose pods changed for it, before a full plan judges every entry again.
func (s *Syncer) forgetRetained(owner Owner) {
	for id, r := range s.retained {
		if r.owner.UID == owner.UID {
			delete(s.retained, id)
		}
	}
	delete(s.podsChanged, owner.UID)
}

// PodsChanged asks for another pass of every owner that keeps an entry only
// because pods in namespace still ran under it: call it when a pod there is
// deleted or relabelled, so the entry goes once no pod needs it. The pass
// need not be a full one: the owner's next SyncDelta judges again the
// entries it keeps in namespace (Options.Recheck).
func (s *Syncer) PodsChanged(namespace string) {
	s.mu.Lock()
	var notify []Owner
	for _, r := range s.retained {
		if r.namespace != namespace {
			continue
		}
		changed := s.podsChanged[r.owner.UID]
		if changed == nil {
			changed = map[string]struct{}{}
			s.podsChanged[r.owner.UID] = changed
		}
		if _, asked := changed[namespace]; !asked {
			changed[namespace] = struct{}{}
			notify = append(notify, r.owner)
		}
	}
	s.mu.Unlock()
	for _, o := range notify {
		s.opts.Recheck(o)
	}
}

// recheckable reports whether SyncDelta may judge again the entries owner
// keeps in the namespaces whose pods changed: the view of each of their
// parents must be valid and no older than the resync interval. s.mu is
// held.
func (s *Syncer) recheckable(owner Owner, now time.Time) bool {
	changed := s.podsChanged[owner.UID]
	if len(changed) == 0 {
		return true
	}
	for _, r := range s.retained {
		if r.owner.UID != owner.UID {
			continue
		}
		if _, ok := changed[r.namespace]; !ok {
			continue
		}
		if !s.views[r.parent].fresh(now, s.opts.ResyncInterval) {
			return false
		}
	}
	return true
}

// recheck judges again, in the plan of a SyncDelta numbered mark, the
// entries owner keeps in the namespaces whose pods changed since: each
// stays while a pod that needed it still does, and goes otherwise. An
// entry owner wants again is no longer kept. s.mu is held, and
// recheckable was true.
func (s *Syncer) recheck(r *retainer, mark uint64, out *Outcome) {
	owner := r.owner
	changed := s.podsChanged[owner.UID]
	if len(changed) == 0 {
		return
	}
	delete(s.podsChanged, owner.UID)
	tag := owner.Tag()
	claimed := s.claims.byOwner[owner.UID]
	// Collected first: judging an entry records it again.
	var due []string
	for id, kept := range s.retained {
		if _, ok := changed[kept.namespace]; ok && kept.owner.UID == owner.UID && !r.judged[id] {
			due = append(due, id)
		}
	}
	slices.Sort(due)
	for _, id := range due {
		kept := s.retained[id]
		delete(s.retained, id)
		o := s.views[kept.parent].ours[id]
		if o == nil || o.owner != tag || o.mark == mark {
			// Gone, taken over, or wanted by this plan.
			continue
		}
		if _, wanted := claimed[o.entry.Key()]; wanted {
			continue
		}
		r.drop(kept.parent, id, o, out)
		if !slices.Contains(out.Rechecked, o.entry.ParentID) {
			out.Rechecked = append(out.Rechecked, o.entry.ParentID)
		}
	}
}
