package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/spiffe-operator/internal/labelset"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// A policy of pods renders {ownerKind} and {ownerName} from the pod's
// owner references (pods.Owner). Owner references change while a pod
// runs: the garbage collector orphans the pods of a ReplicaSet deleted
// with --cascade=orphan, and a controller whose selector matches adopts
// them. The pod event that carries such a change must reach the policies,
// or the entry keeps the identity of a controller the pod no longer has
// until the next resync.
func TestAPodWhoseControllerChangesStartsAPassOfThePoliciesOfPods(t *testing.T) {
	yes := true
	pod := func(owners ...metav1.OwnerReference) *pods.Object {
		return &pods.Object{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "a", Name: "web-1", UID: "u1", OwnerReferences: owners},
			LabelSet:       labelset.FromMap(map[string]string{"app": "web"}),
			ServiceAccount: "web", NodeName: "n1", Phase: "Running",
		}
	}
	old := pod(metav1.OwnerReference{Kind: "ReplicaSet", Name: "web-abc", UID: "rs1", Controller: &yes})
	cases := map[string]*pods.Object{
		"orphaned":                      pod(),
		"adopted by another controller": pod(metav1.OwnerReference{Kind: "ReplicaSet", Name: "api-def", UID: "rs2", Controller: &yes}),
	}
	for name, cur := range cases {
		t.Run(name, func(t *testing.T) {
			if k, n := pods.Owner(old); k == "" || n == "" {
				t.Fatalf("the old pod has no owner: %s/%s", k, n)
			}
			ok, nk := pods.Owner(cur)
			if ok == "ReplicaSet" && nk == "web-abc" {
				t.Fatalf("the case does not change the owner")
			}
			if !podPlacementChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}) {
				t.Errorf("a change of the pod's controller (%s/%s -> %q/%q) starts no pass: an entry rendered from "+
					"{ownerKind}/{ownerName} keeps the old controller's identity until the resync", "ReplicaSet", "web-abc", ok, nk)
			}
		})
	}
}
