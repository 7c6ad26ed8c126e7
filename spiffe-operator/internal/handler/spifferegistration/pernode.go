package spifferegistration

import (
	"context"
	"fmt"
	"slices"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// nodeParent is the parent ID of the entries of pods on one node.
type nodeParent struct {
	id spiffeid.ID
	// exists is false when no Node object has the pod's node name.
	exists bool
	err    error
}

// byNode turns each entry of in (rendered without a parent) into one entry
// per node that runs a pod the entry selects, under that node's parent ID.
// A node enters the parent ID, hence the entry's key and ID. Pods bound to
// a node name no Node object has get nothing: no agent of the cluster can
// attest them, and whoever may create pods can name any node. The failures
// are nodes whose parent ID does not render.
func (h *Handler) byNode(ctx context.Context, p *policy, in []*entries.Entry) ([]*entries.Entry, []v1alpha1.Failure, error) {
	var (
		out      = make([]*entries.Entry, 0, len(in))
		failures []v1alpha1.Failure
		parents  = map[string]nodeParent{}
		nodeSet  []string
	)
	parentOn := func(name string) (nodeParent, error) {
		if np, ok := parents[name]; ok {
			return np, nil
		}
		var np nodeParent
		if h.Nodes != nil {
			n, found, err := h.Nodes(ctx, name)
			if err != nil {
				return np, err
			}
			np.exists = found
			if found {
				np.id, np.err = p.nodeParent(n)
			}
		}
		parents[name] = np
		if np.err != nil {
			failures = append(failures, v1alpha1.Failure{Object: "Node " + name, Reason: ReasonInvalidParentIDTemplate,
				Message: fmt.Sprintf("spec.parentIDTemplate: %v", np.err)})
		}
		return np, nil
	}
	for _, e := range in {
		sh, ok := entries.ShapeOf(e)
		if !ok || h.Pods == nil {
			// Rendered entries always name a namespace and service account.
			continue
		}
		scheduled, err := h.Pods(ctx, sh.Namespace, sh.ServiceAccount)
		if err != nil {
			return nil, nil, err
		}
		nodeSet = nodeSet[:0]
		for _, pod := range scheduled {
			if sh.Matches(pod.Labels) && !slices.Contains(nodeSet, pod.Node) {
				nodeSet = append(nodeSet, pod.Node)
			}
		}
		slices.Sort(nodeSet)
		for _, name := range nodeSet {
			np, err := parentOn(name)
			if err != nil {
				return nil, nil, fmt.Errorf("look up nodes: %w", err)
			}
			if !np.exists || np.err != nil {
				continue
			}
			c := *e
			c.ParentID = np.id
			c.Normalize()
			out = append(out, &c)
		}
	}
	return out, failures, nil
}
