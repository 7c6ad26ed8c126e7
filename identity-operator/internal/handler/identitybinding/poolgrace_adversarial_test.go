package identitybinding

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// graceBinding returns a binding of key ns/b, uid and generation gen, Ready
// at readyGen with outputs when ready is true.
func graceBinding(uid types.UID, gen int64, ready bool, readyGen int64, outputs bool) *v1alpha1.IdentityBinding {
	b := &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: uid, Generation: gen}}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	b.Status.Conditions = []metav1.Condition{{Type: condition.TypeReady, Status: status, Reason: "R", ObservedGeneration: readyGen}}
	if outputs {
		b.Status.Outputs = []v1alpha1.OutputReference{{APIVersion: "v", Kind: "K", Name: "o"}}
	}
	return b
}

// TestAdversarialPoolGraceIsNeverBorrowedNorStretched: the grace of one run
// never applies to another binding of the same name (new UID), to a spec
// changed since it started, to a binding not Ready at its generation or
// without outputs; a run's start never moves while it lasts; and a run
// restarts only through forget (the pool was found, or the binding went).
func TestAdversarialPoolGraceIsNeverBorrowedNorStretched(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "b"}
	t0 := time.Now().Add(-time.Hour)
	now := time.Now()

	t.Run("not Ready, Ready at an older generation, or no outputs: no grace", func(t *testing.T) {
		var m missingPools
		for _, b := range []*v1alpha1.IdentityBinding{
			graceBinding("u1", 2, false, 2, true),
			graceBinding("u1", 2, true, 1, true),
			graceBinding("u1", 2, true, 2, false),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "u1", Generation: 1}, Status: v1alpha1.IdentityBindingStatus{
				Outputs: []v1alpha1.OutputReference{{Name: "o"}}}},
		} {
			if _, ok := m.since(key, b, now); ok {
				t.Errorf("grace given to %+v", b.Status)
			}
		}
	})

	t.Run("a run's start does not move, and a spec change ends it for good", func(t *testing.T) {
		var m missingPools
		if s, ok := m.since(key, graceBinding("u1", 1, true, 1, true), t0); !ok || !s.Equal(t0) {
			t.Fatalf("run not started")
		}
		if s, ok := m.since(key, graceBinding("u1", 1, true, 1, true), now); !ok || !s.Equal(t0) {
			t.Errorf("the run's start moved to %s", s)
		}
		// spec changed; its status even says Ready at the new generation
		if _, ok := m.since(key, graceBinding("u1", 2, true, 2, true), now); ok {
			t.Errorf("a spec changed during the grace kept it")
		}
	})

	t.Run("a new binding of the same name never inherits the run", func(t *testing.T) {
		var m missingPools
		m.since(key, graceBinding("old", 1, true, 1, true), t0)
		if _, ok := m.since(key, graceBinding("new", 1, false, 0, false), now); ok {
			t.Errorf("a new binding of the same name, never Ready, got the old one's grace")
		}
		if s, ok := m.since(key, graceBinding("new", 1, true, 1, true), now); ok && s.Before(now) {
			t.Errorf("a new binding's run started at the old one's %s", s)
		}
	})

	t.Run("forget on delete: a binding recreated with the same UID-less status gets nothing", func(t *testing.T) {
		var m missingPools
		m.since(key, graceBinding("u1", 1, true, 1, true), t0)
		m.forget(key)
		if _, ok := m.since(key, graceBinding("u2", 1, false, 1, false), now); ok {
			t.Errorf("grace after forget")
		}
	})
}
