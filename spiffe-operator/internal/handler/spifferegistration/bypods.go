package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// nodeParent is the parent ID of the entries of pods on one node.
type nodeParent struct {
	id spiffeid.ID
	// exists is false when no Node object has the pod's node name.
	exists bool
	err    error
}

// byPods turns each entry of in (rendered without looking at pods) into the
// entries its running pods need, groups[i] those of in[i] (see expand). The
// failures are nodes whose parent ID does not render.
func (h *Handler) byPods(ctx context.Context, p *policy, in []*entries.Entry) (groups [][]*entries.Entry, failures []v1alpha1.Failure, err error) {
	nodes := h.nodeParents(p)
	groups = make([][]*entries.Entry, len(in))
	for i, e := range in {
		if groups[i], err = h.expand(ctx, p, nodes, e); err != nil {
			return nil, nil, err
		}
	}
	return groups, nodes.failures, nil
}

// expand returns the entries the running pods of e need: with per-node
// parents, one per node that runs a pod e selects, under that node's
// parent ID (the node thus enters the entry's key and ID); with per-pod
// entries, one per such pod, with its k8s:pod-uid selector (under the
// node's parent, or the fixed one). Pods bound to a node name no Node
// object has get nothing with per-node parents: no agent of the cluster can
// attest them, and whoever may create pods can name any node. Nodes whose
// parent ID does not render are recorded in nodes.failures.
func (h *Handler) expand(ctx context.Context, p *policy, nodes *nodeParents, e *entries.Entry) ([]*entries.Entry, error) {
	sh, ok := entries.ShapeOf(e)
	if !ok {
		// Rendered entries always name a namespace and service account.
		return nil, nil
	}
	running, err := h.podSource().RunningPods(ctx, sh.Namespace, sh.ServiceAccount)
	if err != nil {
		return nil, err
	}
	if p.perPod {
		slices.SortFunc(running, func(a, b pods.RunningPod) int { return strings.Compare(a.UID, b.UID) })
	}
	var out []*entries.Entry
	var nodeSet []string
	for _, pod := range running {
		if !sh.Matches(pod.Labels) {
			continue
		}
		if !p.perPod {
			if pod.Node != "" && !slices.Contains(nodeSet, pod.Node) {
				nodeSet = append(nodeSet, pod.Node)
			}
			continue
		}
		parent, ok, err := nodes.parentFor(ctx, pod.Node)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, withParent(e, parent, entries.Selector{Type: "k8s", Value: "pod-uid:" + pod.UID}))
		}
	}
	slices.Sort(nodeSet)
	for _, name := range nodeSet {
		np, err := nodes.of(ctx, name)
		if err != nil {
			return nil, err
		}
		if np.exists && np.err == nil {
			out = append(out, withParent(e, np.id))
		}
	}
	return out, nil
}

// nodeParents looks up, once per pass, the nodes pods run on and the
// parent IDs of their entries.
type nodeParents struct {
	h        *Handler
	p        *policy
	byName   map[string]nodeParent
	failures []v1alpha1.Failure
}

func (h *Handler) nodeParents(p *policy) *nodeParents {
	return &nodeParents{h: h, p: p, byName: map[string]nodeParent{}}
}

// of returns the node named name and its entries' parent ID.
func (n *nodeParents) of(ctx context.Context, name string) (nodeParent, error) {
	if np, ok := n.byName[name]; ok {
		return np, nil
	}
	var np nodeParent
	if n.h.Nodes != nil {
		node, found, err := n.h.Nodes(ctx, name)
		if err != nil {
			return np, fmt.Errorf("look up nodes: %w", err)
		}
		np.exists = found
		if found && n.p.perNode() {
			if np.id, np.err = n.p.nodeParent(node); np.err == nil {
				n.h.parents.record(np.id.String(), name, node.UID)
			}
		}
	}
	n.byName[name] = np
	if np.err != nil {
		n.failures = append(n.failures, v1alpha1.Failure{Object: "Node " + name, Reason: ReasonInvalidParentIDTemplate,
			Message: fmt.Sprintf("spec.parentIDTemplate: %v", np.err)})
	}
	return np, nil
}

// parentFor returns the parent of the entry of a pod on node (empty when
// not scheduled), and false when the pod gets none: with per-node parents,
// a pod not bound to an existing node.
func (n *nodeParents) parentFor(ctx context.Context, node string) (spiffeid.ID, bool, error) {
	if !n.p.perNode() {
		return n.p.parentID, true, nil
	}
	if node == "" {
		return spiffeid.ID{}, false, nil
	}
	np, err := n.of(ctx, node)
	return np.id, err == nil && np.exists && np.err == nil, err
}

// withParent returns a copy of e under parent, with the extra selectors.
func withParent(e *entries.Entry, parent spiffeid.ID, extra ...entries.Selector) *entries.Entry {
	c := *e
	c.ParentID = parent
	if len(extra) > 0 {
		c.Selectors = append(slices.Clone(e.Selectors), extra...)
	}
	c.Normalize()
	return &c
}
