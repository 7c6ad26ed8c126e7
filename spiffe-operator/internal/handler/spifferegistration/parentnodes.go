package spifferegistration

import (
	"container/list"
	"sync"
)

// maxRenderedParents bounds renderedParents: about 100 bytes a parent, so
// at most about a megabyte, however many nodes come and go.
const maxRenderedParents = 10000

// renderedParents remembers, for the per-node parent IDs this process
// rendered, the name of the node it rendered each for. Retention asks
// which node's agent a parent names; once the Node object is deleted, or
// re-created under a new UID, the node listing no longer tells, but the
// agent that parent names still runs on that node only. It keeps the
// parents rendered most recently, up to max (maxRenderedParents when 0):
// one forgotten, like any parent after a restart, is judged as able to
// serve a pod on any node, so forgetting never deletes what a pod needs.
type renderedParents struct {
	mu  sync.Mutex
	max int
	// node maps a parent ID to its element in recent, whose value is a
	// renderedParent.
	node map[string]*list.Element
	// recent orders the parents, most recently rendered first.
	recent list.List
}

type renderedParent struct {
	parent string
	// node is the node's name; "" marks a parent rendered for more than
	// one node name, which names no single node.
	node string
}

// record notes that parent was rendered for the node named node.
func (r *renderedParents) record(parent, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.node == nil {
		r.node = map[string]*list.Element{}
	}
	if el, ok := r.node[parent]; ok {
		p := el.Value.(*renderedParent)
		if p.node != node {
			p.node = ""
		}
		r.recent.MoveToFront(el)
		return
	}
	r.node[parent] = r.recent.PushFront(&renderedParent{parent: parent, node: node})
	max := r.max
	if max <= 0 {
		max = maxRenderedParents
	}
	for r.recent.Len() > max {
		oldest := r.recent.Back()
		delete(r.node, oldest.Value.(*renderedParent).parent)
		r.recent.Remove(oldest)
	}
}

// nodeOf returns the node parent was rendered for, and false when this
// process has not rendered it (or forgot it) or rendered it for more than
// one node.
func (r *renderedParents) nodeOf(parent string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.node[parent]
	if !ok {
		return "", false
	}
	node := el.Value.(*renderedParent).node
	return node, node != ""
}

// len returns the number of parents remembered.
func (r *renderedParents) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recent.Len()
}
