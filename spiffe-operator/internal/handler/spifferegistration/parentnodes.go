package spifferegistration

import (
	"sync"
	"time"
)

// renderedParents remembers, for every per-node parent ID this process
// rendered, the name of the node it rendered it for. Retention asks which
// node's agent a parent names; once the Node object is deleted, or
// re-created under a new UID, the node listing no longer tells, but the
// agent that parent names still runs on that node only. A parent is
// forgotten once SPIRE has held no entry of the operator's under it for a
// while (see forgetEmpty); after a restart, a parent of no node listed today is judged
// as able to serve a pod on any node.
type renderedParents struct {
	mu sync.Mutex
	// node maps a parent ID to its node's name; "" marks a parent rendered
	// for more than one node name, which names no single node.
	node map[string]string
	// emptySince is when a prune first found that the operator held no
	// entry under a parent, which has not been rendered since.
	emptySince map[string]time.Time
}

// forgetGrace is how long a parent must stay empty, without being rendered
// again, before it is forgotten. Prunes run only while no other pass
// writes (see Handler.pruneParents); the grace covers what a pass does
// between rendering a parent and starting to write.
const forgetGrace = 2 * time.Minute

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
	delete(r.emptySince, parent)
}

// nodeOf returns the node parent was rendered for, and false when this
// process rendered it for none or for more than one.
func (r *renderedParents) nodeOf(parent string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	node := r.node[parent]
	return node, node != ""
}

// forgetEmpty forgets the parents under which empty has reported, at two
// prunes at least forgetGrace apart (now is this one's time) and with no
// render in between, that the operator holds no entry. empty is called
// without r's lock held (it takes the syncer's, which is held while nodeOf
// is called).
func (r *renderedParents) forgetEmpty(now time.Time, empty func(parent string) bool) {
	r.mu.Lock()
	parents := make([]string, 0, len(r.node))
	for p := range r.node {
		parents = append(parents, p)
	}
	r.mu.Unlock()
	isEmpty := make(map[string]bool, len(parents))
	for _, p := range parents {
		isEmpty[p] = empty(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parents {
		if _, known := r.node[p]; !known {
			continue
		}
		since, marked := r.emptySince[p]
		switch {
		case !isEmpty[p]:
			delete(r.emptySince, p)
		case !marked:
			if r.emptySince == nil {
				r.emptySince = map[string]time.Time{}
			}
			r.emptySince[p] = now
		case now.Sub(since) >= forgetGrace:
			delete(r.node, p)
			delete(r.emptySince, p)
		}
	}
}
