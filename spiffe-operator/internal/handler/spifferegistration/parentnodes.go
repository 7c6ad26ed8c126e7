package spifferegistration

import (
	"container/list"
	"sync"
)

// maxRenderedParents bounds renderedParents: about 150 bytes a parent, so
// at most about 1.5 megabytes, however many nodes come and go.
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
	// uid is the UID of the Node object it was last rendered for.
	uid string
}

// record notes that parent was rendered for the node named node, whose
// Node object has the UID uid.
func (r *renderedParents) record(parent, node, uid string) {
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
		p.uid = uid
		r.recent.MoveToFront(el)
		return
	}
	r.node[parent] = r.recent.PushFront(&renderedParent{parent: parent, node: node, uid: uid})
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
	node, _, ok := r.incarnationOf(parent)
	return node, ok
}

// incarnationOf is nodeOf with the UID of the Node object parent was last
// rendered for.
func (r *renderedParents) incarnationOf(parent string) (node, uid string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, found := r.node[parent]
	if !found {
		return "", "", false
	}
	p := el.Value.(*renderedParent)
	return p.node, p.uid, p.node != ""
}

// len returns the number of parents remembered.
func (r *renderedParents) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recent.Len()
}
