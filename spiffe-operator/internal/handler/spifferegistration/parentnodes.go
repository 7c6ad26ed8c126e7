package spifferegistration

import "sync"

// renderedParents remembers, for every per-node parent ID this process
// rendered, the name of the node it rendered it for. Retention asks which
// node's agent a parent names; once the Node object is deleted, or
// re-created under a new UID, the node listing no longer tells, but the
// agent that parent names still runs on that node only. A parent is
// forgotten once SPIRE holds no entry of the operator's under it (see
// forgetEmpty); after a restart, a parent of no node listed today is judged
// as able to serve a pod on any node.
type renderedParents struct {
	mu sync.Mutex
	// node maps a parent ID to its node's name; "" marks a parent rendered
	// for more than one node name, which names no single node.
	node map[string]string
}

// record notes that parent was rendered for the node named node.
func (r *renderedParents) record(parent, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.node == nil {
		r.node = map[string]string{}
	}
	if prev, ok := r.node[parent]; ok && prev != node {
		node = ""
	}
	r.node[parent] = node
}

// nodeOf returns the node parent was rendered for, and false when this
// process rendered it for none or for more than one.
func (r *renderedParents) nodeOf(parent string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	node := r.node[parent]
	return node, node != ""
}

// forgetEmpty forgets the parents under which empty reports that the
// operator holds no entry any more. empty is called without r's lock held
// (it takes the syncer's, which is held while nodeOf is called).
func (r *renderedParents) forgetEmpty(empty func(parent string) bool) {
	r.mu.Lock()
	parents := make([]string, 0, len(r.node))
	for p := range r.node {
		parents = append(parents, p)
	}
	r.mu.Unlock()
	var gone []string
	for _, p := range parents {
		if empty(p) {
			gone = append(gone, p)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range gone {
		delete(r.node, p)
	}
}
