package entrysync

import (
	"context"
	"strings"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// Pod is what retention reads of an existing pod.
type Pod struct {
	// UID is the pod's UID.
	UID string
	// Labels are the pod's labels.
	Labels map[string]string
}

// PodLister returns every running pod in namespace that runs as
// serviceAccount. It reads a cache and must not block.
type PodLister func(ctx context.Context, namespace, serviceAccount string) ([]Pod, error)

// podShape is what an entry's selectors ask of a pod, when they are all
// k8s:ns, k8s:sa and k8s:pod-label selectors (the ones the operator can
// check against its pod cache).
type podShape struct {
	namespace, serviceAccount string
	labels                    map[string]string
}

// shapeOf returns the pod shape of e, and false when e has a selector of
// another kind, lacks the namespace or service account, or can match no pod
// at all (two namespaces, two service accounts or two values of one label:
// SPIRE requires every selector to match), so that no pod needs it.
func shapeOf(e *entries.Entry) (podShape, bool) {
	var sh podShape
	// set records v in *field, and fails when another value is there.
	set := func(field *string, v string) bool {
		if *field != "" && *field != v {
			return false
		}
		*field = v
		return true
	}
	for _, sel := range e.Selectors {
		if sel.Type != "k8s" {
			return podShape{}, false
		}
		ok := true
		switch {
		case strings.HasPrefix(sel.Value, "ns:"):
			ok = set(&sh.namespace, strings.TrimPrefix(sel.Value, "ns:"))
		case strings.HasPrefix(sel.Value, "sa:"):
			ok = set(&sh.serviceAccount, strings.TrimPrefix(sel.Value, "sa:"))
		case strings.HasPrefix(sel.Value, "pod-label:"):
			k, v, cut := strings.Cut(strings.TrimPrefix(sel.Value, "pod-label:"), ":")
			if !cut {
				return podShape{}, false
			}
			if sh.labels == nil {
				sh.labels = map[string]string{}
			}
			if have, dup := sh.labels[k]; dup && have != v {
				return podShape{}, false
			}
			sh.labels[k] = v
		default:
			ok = false
		}
		if !ok {
			return podShape{}, false
		}
	}
	return sh, sh.namespace != "" && sh.serviceAccount != ""
}

// matches reports whether a pod with the given labels (in the shape's
// namespace and service account) is selected by the shape.
func (sh podShape) matches(labels map[string]string) bool {
	for k, v := range sh.labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// retention records an entry kept only because pods still run under it.
type retention struct {
	owner     Owner
	namespace string
}

// retainer decides, for one plan, which of an owner's entries that are no
// longer wanted must stay because an existing pod matches them and nothing
// else the owner wants covers that pod. s.mu is held while it runs.
type retainer struct {
	s     *Syncer
	ctx   context.Context
	owner Owner
	p     *plan
	// cover maps "namespace/serviceAccount" to the shapes of the entries
	// the owner wants; built on first use.
	cover map[string][]podShape
}

// drop plans the deletion of owner's entry o (ID id, under parent), which
// the owner no longer wants, unless a pod still needs it.
func (r *retainer) drop(parent, id string, o *ours, out *Outcome) {
	if r.keep(id, o) {
		out.Retained++
		return
	}
	r.p.stale = append(r.p.stale, deletion{parent: parent, id: id})
}

// keep reports whether the stale entry o (ID id) must stay, and records it.
// Only the pods that needed the entry when this process first found it no
// longer wanted count, and only while they still match it: a pod started or
// relabelled later, by anyone who may do so in the namespace, must not keep
// an identity the owner withdrew alive for ever.
func (r *retainer) keep(id string, o *ours) bool {
	if r.s.opts.Pods == nil {
		return false
	}
	sh, ok := shapeOf(&o.entry)
	if !ok {
		return false
	}
	pods, err := r.s.opts.Pods(r.ctx, sh.namespace, sh.serviceAccount)
	if err != nil {
		// Not knowing which pods run, keep the entry: the next pass decides.
		logf.FromContext(r.ctx).Error(err, "reading pods; keeping an entry no longer wanted", "entryID", id)
		r.s.retained[id] = retention{owner: r.owner, namespace: sh.namespace}
		return true
	}
	needy, recorded := r.s.withdrawn[id]
	if !recorded {
		needy = map[string]bool{}
	}
	kept := false
	for _, pod := range pods {
		if recorded && !needy[pod.UID] || !sh.matches(pod.Labels) || r.covered(sh.namespace, sh.serviceAccount, pod.Labels) {
			continue
		}
		kept = true
		if recorded {
			break
		}
		needy[pod.UID] = true
	}
	if !recorded {
		r.s.withdrawn[id] = needy
	}
	if kept {
		r.s.retained[id] = retention{owner: r.owner, namespace: sh.namespace}
	}
	return kept
}

// covered reports whether an entry the owner wants selects the pod.
func (r *retainer) covered(namespace, serviceAccount string, labels map[string]string) bool {
	if r.cover == nil {
		r.cover = map[string][]podShape{}
		add := func(e *entries.Entry) {
			if sh, ok := shapeOf(e); ok {
				k := sh.namespace + "/" + sh.serviceAccount
				r.cover[k] = append(r.cover[k], sh)
			}
		}
		for _, e := range r.p.creates {
			add(e)
		}
		// Entries the owner claims and that exist (ours or another owner's).
		claimed := r.s.claims.byOwner[r.owner.UID]
		for _, v := range r.s.views {
			for k, id := range v.byKey {
				if _, ok := claimed[k]; ok {
					add(&v.ours[id].entry)
				}
			}
		}
	}
	for _, sh := range r.cover[namespace+"/"+serviceAccount] {
		if sh.matches(labels) {
			return true
		}
	}
	return false
}

// forgetRetained drops the retention records of owner (before a full plan
// rebuilds them) or of one entry (once deleted).
func (s *Syncer) forgetRetained(owner Owner) {
	for id, r := range s.retained {
		if r.owner.UID == owner.UID {
			delete(s.retained, id)
		}
	}
}

// PodsChanged asks for another pass of every owner that keeps an entry only
// because pods in namespace still ran under it: call it when a pod there is
// deleted or relabelled, so the entry goes once no pod needs it.
func (s *Syncer) PodsChanged(namespace string) {
	s.mu.Lock()
	var notify []Owner
	seen := map[string]bool{}
	for _, r := range s.retained {
		if r.namespace == namespace && !seen[string(r.owner.UID)] {
			seen[string(r.owner.UID)] = true
			notify = append(notify, r.owner)
		}
	}
	s.mu.Unlock()
	for _, o := range notify {
		s.opts.Notify(o)
	}
}
