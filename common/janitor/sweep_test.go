package janitor_test

// Covers the sweep of every environment (Cleanup reads the declared types
// in every environment by the owner-uid label and deletes through the
// unscoped client with UID and resourceVersion preconditions): a tenant who
// may create, label and delete ConfigMaps tries to get objects that are not
// the owner's children deleted by its sweep; and the owner's own stale
// child that a cache read lags behind.

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

var _ = Describe("A sweep of every environment and a tenant's objects", func() {
	It("holds: deletes none of the tenant's objects that are not the owner's children, in any environment or namespace", func(ctx context.Context) {
		ns, elsewhere := cp.Namespace(ctx), cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		other := owner(ctx, ns, "other")
		uid := string(w.UID)
		mk := func(ns, name string, l map[string]string, refs ...metav1.OwnerReference) {
			Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l, OwnerReferences: refs},
				Data: map[string]string{"tenant": "data"}})).To(Succeed())
		}
		// The owner-uid label alone, in another environment and namespace.
		mk(ns, "uid-prod", map[string]string{labels.Environment: "prod", labels.OwnerUID: uid})
		mk(elsewhere, "uid-elsewhere", map[string]string{labels.Environment: "prod", labels.OwnerUID: uid})
		// The owner's UID with another kind.
		mk(ns, "other-kind", map[string]string{labels.Environment: "prod", labels.OwnerUID: uid, labels.OwnerKind: "Gadget"})
		// A non-controller owner reference to the owner (for garbage
		// collection) and the owner-uid label.
		no := false
		mk(ns, "gc-ref", map[string]string{labels.OwnerUID: uid},
			metav1.OwnerReference{APIVersion: "test.trustplane.dev/v1", Kind: "Widget", Name: "w", UID: w.UID, Controller: &no})
		// The other owner's UID and kind with w's controller reference is the
		// other owner's business: w lists by its own UID only.
		mk(ns, "others-labels", map[string]string{labels.OwnerUID: string(other.UID), labels.OwnerKind: "Widget"})

		j := newJanitor(w)
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		for _, k := range []client.ObjectKey{{Namespace: ns, Name: "uid-prod"}, {Namespace: elsewhere, Name: "uid-elsewhere"},
			{Namespace: ns, Name: "other-kind"}, {Namespace: ns, Name: "gc-ref"}, {Namespace: ns, Name: "others-labels"}} {
			Expect(cp.Client.Get(ctx, k, &corev1.ConfigMap{})).To(Succeed(), "%s was deleted by w's sweep", k)
		}
	})

	It("holds (documented limit): the tenant's object given both owner labels is swept in any environment", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Namespace: ns,
			Labels: map[string]string{labels.Environment: "prod", labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerName: w.Name, labels.OwnerNamespace: w.Namespace}}})).To(Succeed())
		j := newJanitor(w)
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "labelled")).To(BeFalse())
	})
})

var _ = Describe("A sweep over a cache that lags behind the operator's own write", func() {
	It("sweeps the owner's stale child (still the owner's) rather than fail the pass on a conflict", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")
		stale := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, stale)).To(Succeed())

		// The owner's own later pass rewrites the child (still its own).
		j := newJanitor(w)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}}
		_, err := j.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"k": "v2"}; return nil })
		Expect(err).NotTo(HaveOccurred())

		// The next pass drops it; its cache still shows the version before.
		direct, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		lagging := interceptor.NewClient(direct, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if l, ok := list.(*corev1.ConfigMapList); ok {
					l.Items = []corev1.ConfigMap{*stale.DeepCopy()}
					return nil
				}
				return c.List(ctx, list, opts...)
			},
		})
		later, err := janitor.New(scoped.New(lagging, "dev"), w)
		Expect(err).NotTo(HaveOccurred())
		Expect(later.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err = later.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred(), "the sweep failed on the operator's own cache lag")
		Expect(exists(ctx, ns, "child")).To(BeFalse())
	})
})
