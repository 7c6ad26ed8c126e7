package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestAdversarialAliveOwnersCountsEveryEnvironment: an instance with
// --environments=a skips objects of environment b, but shares the SPIRE
// server and the entry-ID prefix with the instance of b. Its orphan
// collection judges an entry by its owner tag against AliveOwners. Safe
// behaviour: objects of every environment (and unlabelled ones) count as
// alive, so A never deletes the entries of B's live objects.
func TestAdversarialAliveOwnersCountsEveryEnvironment(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	regB := &v1alpha1.SpiffeRegistration{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "11111111-1111-1111-1111-111111111111",
		Labels: map[string]string{labels.Environment: "b"}}}
	regNone := &v1alpha1.SpiffeRegistration{ObjectMeta: metav1.ObjectMeta{Name: "none", UID: "22222222-2222-2222-2222-222222222222"}}
	entB := &v1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "e", UID: "33333333-3333-3333-3333-333333333333",
		Labels: map[string]string{labels.Environment: "b"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(regB, regNone, entB).Build()
	alive, err := AliveOwners(c)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{string(regB.UID), string(regNone.UID), string(entB.UID)} {
		if !alive[entries.OwnerTag(k8stypes.UID(uid))] {
			t.Fatalf("owner %s of another environment not counted alive: %v", uid, alive)
		}
	}
}
