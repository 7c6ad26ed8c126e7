package controller_test

import (
	"net/http"
	"strings"
	"sync"
)

// listRecorder records the label selectors of the list requests of outputs
// (SpiffeEntries and ClusterSPIFFEIDs) that the operator sends to the API
// server outside its informers (the uncached reads of the janitor and of
// the handler), and the bindings whose status it writes.
type listRecorder struct {
	mu        sync.Mutex
	selectors []string
	// statusWrites names the binding of each status write, in order.
	statusWrites []string
}

// see records req when it lists outputs uncached or writes a binding's
// status (for testenv.ObserveRequests).
func (r *listRecorder) see(req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sel, ok := uncachedOutputList(req); ok {
		r.selectors = append(r.selectors, sel)
	}
	if name, ok := bindingStatusWrite(req); ok {
		r.statusWrites = append(r.statusWrites, name)
	}
}

// uncachedOutputList returns the label selector of req when it lists
// outputs, not for an informer: informers list with a resourceVersion or
// watch, the operator's uncached reads do neither.
func uncachedOutputList(req *http.Request) (string, bool) {
	if req.Method != http.MethodGet {
		return "", false
	}
	path := req.URL.Path
	if !strings.HasSuffix(path, "/spiffeentries") && !strings.HasSuffix(path, "/clusterspiffeids") {
		return "", false
	}
	q := req.URL.Query()
	if q.Get("watch") != "" || q.Has("resourceVersion") || q.Has("sendInitialEvents") {
		return "", false
	}
	return q.Get("labelSelector"), true
}

// bindingStatusWrite returns the namespace/name of the binding whose
// status req writes.
func bindingStatusWrite(req *http.Request) (string, bool) {
	if req.Method != http.MethodPut && req.Method != http.MethodPatch {
		return "", false
	}
	// .../namespaces/<ns>/identitybindings/<name>/status
	parts := strings.Split(strings.TrimSuffix(req.URL.Path, "/"), "/")
	n := len(parts)
	if n < 5 || parts[n-1] != "status" || parts[n-3] != "identitybindings" || parts[n-5] != "namespaces" {
		return "", false
	}
	return parts[n-4] + "/" + parts[n-2], true
}

// statusWritesOf returns how many status writes of bindings of namespace
// ns were recorded from the from'th on, and the marker for the next.
func (r *listRecorder) statusWritesOf(ns string, from int) (n, next int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range r.statusWrites[min(from, len(r.statusWrites)):] {
		if strings.HasPrefix(name, ns+"/") {
			n++
		}
	}
	return n, len(r.statusWrites)
}

// count returns how many recorded lists selected by one of the owner UIDs
// in uids, from the index'th recorded on.
func (r *listRecorder) count(from int, uids map[string]bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, sel := range r.selectors[min(from, len(r.selectors)):] {
		for _, term := range strings.Split(sel, ",") {
			if _, v, ok := strings.Cut(term, "="); ok && uids[strings.TrimPrefix(v, "=")] {
				n++
				break
			}
		}
	}
	return n
}

// mark returns the index the next recorded list gets.
func (r *listRecorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.selectors)
}
