package controller

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// announced is the state an object's events last announced.
type announced struct {
	ready   metav1.ConditionStatus
	blocked bool
}

// transitions remembers, per object, what was last announced.
type transitions struct {
	mu   sync.Mutex
	last map[types.NamespacedName]announced
}

func newTransitions() *transitions {
	return &transitions{last: map[types.NamespacedName]announced{}}
}

// swap records now for key and returns what was recorded before, if anything.
func (t *transitions) swap(key types.NamespacedName, now announced) (announced, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before, ok := t.last[key]
	t.last[key] = now
	return before, ok
}

func (t *transitions) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.last, key)
}
