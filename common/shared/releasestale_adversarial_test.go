package shared_test

// A release over a read that lags behind, against a real API server (its
// own control plane, not the suite's):

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/shared"
)

// TestReleaseOverAStaleReadNeverCreatesTheObject: a ConfigMap that
// the operator shares with the tenant's own writer (one key each) is
// deleted by the tenant. The operator's release of its key runs on the
// metadata its cache still holds (the cache has not seen the delete yet,
// as bundle-operator's target cache may lag). Release "takes our fields
// out": the shared path sends an empty server-side apply with force and no
// precondition, and an apply of a name that does not exist creates it.
// Safe behaviour: the release of an object that is gone leaves nothing;
// no object of that name exists afterwards (the sole-writer path already
// preconditions its delete on the UID and resourceVersion read).
//
// Seen failing: the release re-created the ConfigMap empty, under another UID. The apply now carries the UID read.
func TestReleaseOverAStaleReadNeverCreatesTheObject(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, ns := testapi.PlaneForTest(t, "sh-stale-")

	ours := shared.Writer{Client: c, FieldManager: "trustplane-test"}
	theirs := shared.Writer{Client: c, FieldManager: "someone-else"}
	g.Expect(theirs.Apply(ctx, configMap(ns, "shared", map[string]any{"app.conf": "theirs"}), false)).To(Succeed())
	g.Expect(ours.Apply(ctx, configMap(ns, "shared", map[string]any{"ca": "ours"}), false)).To(Succeed())

	// What the cache holds: the object as both writers left it.
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, m)).To(Succeed())
	g.Expect(ours.Shared(m.ManagedFields)).To(BeTrue(), "precondition: the object is shared")

	// The tenant deletes the whole ConfigMap; the cache has not seen it yet.
	g.Expect(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}})).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, &corev1.ConfigMap{}))
	}).Should(BeTrue())

	_, err := ours.Release(ctx, m)
	g.Expect(err).To(MatchError(shared.ErrChangedSinceRead), "the release over the stale read must say the object changed")

	got := &corev1.ConfigMap{}
	err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, got)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(),
		"the release re-created the ConfigMap the tenant deleted: uid %s (was %s), labels %v, data %v, managed by %v",
		got.UID, m.UID, got.Labels, got.Data, managers(got.ManagedFields))
}

func managers(entries []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	return out
}
