package spifferegistration

import (
	"context"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// inheritLastGood finds a last good entry for the selected workloads whose
// render failed and that have none in the memo: the process never saw
// them render (the operator restarted since, and restarts forget last good
// renders). Their last good entry is then the one of the policy's entries
// in SPIRE that serves every pod they start: it names the workload's
// namespace and service account, and the pod labels it selects on are
// among the workload's selector labels (selectors of containers, images,
// owners or nodes only narrow). So a rollout after the restart keeps the
// identity its pods have, as it would without the restart. A workload two
// different such entries serve (other than by node or pod) gets none, and
// then, as before, only its pods running when the entry was found no
// longer wanted keep it. The entries found are
// recorded in the memo, as a render's last good entry is, and returned,
// to be wanted by this pass.
func (h *Handler) inheritLastGood(ctx context.Context, obj *v1alpha1.SpiffeRegistration, p *policy, memo *policyRenders,
	lost []workload.Workload) ([]*entries.Entry, error) {
	if len(lost) == 0 {
		return nil, nil
	}
	held, err := h.Syncer.Held(ctx, h.ownerFor(obj, p), entrysync.ParseParents(obj.Status.ParentIDs, obj.Spec.ParentID))
	if err != nil {
		return nil, fmt.Errorf("read the policy's entries for the workloads that fail to render: %w", err)
	}
	bases := baseEntries(p, held)
	var out []*entries.Entry
	for _, w := range lost {
		if e := servingEntry(w, bases); e != nil && memo.keepAsLastGood(w, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// account is a namespace and service account.
type account struct{ namespace, serviceAccount string }

// base is a base entry with its pod shape.
type base struct {
	entry entries.Entry
	shape entries.PodShape
}

// baseEntries returns the base entries of held by the account their pods
// run as. A base entry is an entry without the node or pod its expansion
// added: with per-node parents or per-pod entries, its parent is left
// unset and its k8s:pod-uid selector dropped, for the pass to expand it
// again. Entries of no single account are left out.
func baseEntries(p *policy, held []entries.Entry) map[account][]base {
	out := map[account][]base{}
	for _, e := range held {
		if p.byPods() {
			e.ParentID = spiffeid.ID{}
			e.Selectors = withoutPodUID(e.Selectors)
		}
		e.Normalize()
		sh, ok := entries.ShapeOf(&e)
		if !ok {
			continue
		}
		a := account{sh.Namespace, sh.ServiceAccount}
		out[a] = append(out[a], base{entry: e, shape: sh})
	}
	return out
}

// servingEntry returns the one base entry that serves every pod of w (see
// inheritLastGood), or nil when none or several different ones do.
func servingEntry(w workload.Workload, bases map[account][]base) *entries.Entry {
	var found *entries.Entry
	for _, b := range bases[account{w.Namespace, w.ServiceAccount}] {
		if !b.shape.Matches(labels.Set(w.MatchLabels)) {
			continue
		}
		switch {
		case found == nil:
			e := b.entry
			found = &e
		case found.Key() != b.entry.Key():
			return nil
		}
	}
	return found
}

// withoutPodUID returns sels without k8s:pod-uid selectors.
func withoutPodUID(sels []entries.Selector) []entries.Selector {
	out := make([]entries.Selector, 0, len(sels))
	for _, s := range sels {
		if s.Type == "k8s" && strings.HasPrefix(s.Value, "pod-uid:") {
			continue
		}
		out = append(out, s)
	}
	return out
}
