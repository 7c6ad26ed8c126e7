package shared_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/shared"
)

// cp is the suite's control plane.
var cp = testapi.NewSuite("sh-")

func TestShared(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "shared")
}

// configMap is an apply configuration of ConfigMap ns/name holding data.
func configMap(ns, name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns}, "data": data}}
}

// metadataOf reads the live metadata of ConfigMap ns/name, as a target cache holds it.
func metadataOf(ctx context.Context, ns, name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
	return m
}

var _ = Describe("Writer", func() {
	ours := shared.Writer{Client: nil, FieldManager: "trustplane-test"}
	theirs := shared.Writer{Client: nil, FieldManager: "someone-else"}
	BeforeEach(func() { ours.Client, theirs.Client = cp.Client, cp.Client })

	It("deletes on release an object only it manages", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(ours.Apply(ctx, configMap(ns, "sole", map[string]any{"ca": "x"}), false)).To(Succeed())
		rv, err := ours.Release(ctx, metadataOf(ctx, ns, "sole"))
		Expect(err).NotTo(HaveOccurred())
		Expect(rv).NotTo(BeEmpty())
		Expect(apierrors.IsNotFound(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sole"}, &corev1.ConfigMap{}))).To(BeTrue())
	})

	It("never deletes on release an object edited since it was read", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(ours.Apply(ctx, configMap(ns, "edited", map[string]any{"ca": "x"}), false)).To(Succeed())
		m := metadataOf(ctx, ns, "edited")
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edited"}, cm)).To(Succeed())
		cm.Labels = map[string]string{"touched": "by-hand"}
		Expect(cp.Client.Update(ctx, cm)).To(Succeed())
		_, err := ours.Release(ctx, m)
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edited"}, &corev1.ConfigMap{})).To(Succeed())
	})

	It("drops exactly its own keys on release of an object others write too", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "shared", map[string]any{"app.conf": "theirs"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "shared", map[string]any{"ca": "ours"}), false)).To(Succeed())
		_, err := ours.Release(ctx, metadataOf(ctx, ns, "shared"))
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, cm)).To(Succeed())
		Expect(cm.Data).To(Equal(map[string]string{"app.conf": "theirs"}))
	})

	It("counts an update under its field manager's name as another writer's, and drops only its own keys on release", func(ctx context.Context) {
		// It writes only by server-side apply; an update that gives its
		// manager's name (kubectl patch --field-manager) is someone else's.
		ns := cp.Namespace(ctx)
		Expect(ours.Apply(ctx, configMap(ns, "borrowed", map[string]any{"ca": "ours"}), false)).To(Succeed())
		Expect(cp.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "borrowed"}},
			client.RawPatch(types.MergePatchType, []byte(`{"data":{"app.conf":"theirs"}}`)), client.FieldOwner(ours.FieldManager))).To(Succeed())
		m := metadataOf(ctx, ns, "borrowed")
		Expect(ours.Shared(m.ManagedFields)).To(BeTrue(), "managed fields: %v", m.ManagedFields)

		_, err := ours.Release(ctx, m)
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "borrowed"}, cm)).To(Succeed(), "an object holding another's key was deleted")
		Expect(cm.Data).To(Equal(map[string]string{"app.conf": "theirs"}))
	})

	It("leaves on release a shared object its other writer made immutable, and says so", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(ours.Apply(ctx, configMap(ns, "frozen", map[string]any{"ca": "ours"}), false)).To(Succeed())
		frozen := configMap(ns, "frozen", map[string]any{"theirs": "x"})
		frozen.Object["immutable"] = true
		Expect(theirs.Apply(ctx, frozen, false)).To(Succeed())
		m := metadataOf(ctx, ns, "frozen")

		_, err := ours.Release(ctx, m)
		Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeTrue(), "got %v", err)
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "frozen"}, cm)).To(Succeed())
		Expect(cm.Data).To(Equal(map[string]string{"ca": "ours", "theirs": "x"}))
		Expect(cm.ResourceVersion).To(Equal(m.ResourceVersion))
	})

	It("leaves on release a shared object that is not valid without its fields, and says so", func(ctx context.Context) {
		name := "sh-ctb-required"
		ctb := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"trustBundle": string(cp.Config.CAData)}}}
		Expect(ours.Apply(ctx, ctb, false)).To(Succeed())
		annotated := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
			"metadata": map[string]any{"name": name, "annotations": map[string]any{"theirs": "x"}}}}
		Expect(theirs.Apply(ctx, annotated, false)).To(Succeed())
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(certificatesv1.SchemeGroupVersion.WithKind("ClusterTrustBundle"))
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, m)).To(Succeed())

		_, err := ours.Release(ctx, m)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeTrue(), "got %v", err)
		cur := &certificatesv1.ClusterTrustBundle{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, cur)).To(Succeed())
		Expect(cur.ResourceVersion).To(Equal(m.ResourceVersion))
		Expect(cp.Client.Delete(ctx, cur)).To(Succeed())
	})

	It("leaves as it is on release an object it wrote no field of, even one whose managed fields were wiped", func(ctx context.Context) {
		// Someone who may patch an object (but not delete it) wipes its
		// managed fields and puts the holder label on it, so that it looks
		// like a target of ours no other writer shares.
		ns := cp.Namespace(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "wiped", map[string]any{"app.conf": "theirs"}), false)).To(Succeed())
		wipe := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`))
		Expect(cp.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wiped"}}, wipe)).To(Succeed())
		m := metadataOf(ctx, ns, "wiped")
		Expect(m.ManagedFields).To(BeEmpty())

		_, err := ours.Release(ctx, m)
		Expect(err).NotTo(HaveOccurred(), "a release of nothing of ours must not fail, or whoever labels an object blocks its owner's deletion")
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wiped"}, cm)).To(Succeed(), "the object was deleted")
		Expect(cm.Data).To(Equal(map[string]string{"app.conf": "theirs"}))
		Expect(cm.ResourceVersion).To(Equal(m.ResourceVersion))
	})

	It("never takes over a field another writer owns without force, nor creates over an existing object", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "taken", map[string]any{"ca": "theirs"}), false)).To(Succeed())
		err := ours.Apply(ctx, configMap(ns, "taken", map[string]any{"ca": "ours"}), false)
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)

		create := configMap(ns, "taken", map[string]any{"other": "ours"})
		create.SetResourceVersion(shared.CreateOnly)
		Expect(apierrors.IsConflict(ours.Apply(ctx, create, false))).To(BeTrue())
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "taken"}, cm)).To(Succeed())
		Expect(cm.Data).To(Equal(map[string]string{"ca": "theirs"}))
	})
})
