package janitor_test

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// The janitor is the client a handler is given: every write it offers, not
// only CreateOrUpdate, Create, Update and Patch, must leave an object of a
// child's name that the owner does not own as it is. A tenant who may
// create ConfigMaps in the owner's namespace (with the environment label)
// must not get theirs deleted, adopted or written over by a handler that
// deletes, applies or writes the status of a child by name.
var _ = Describe("Objects in the way of a child, deleted or applied by name", func() {
	expectNotOwned := func(err error, what string) {
		GinkgoHelper()
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "%s of a foreign object: got %v", what, err)
	}

	It("does not delete an object of the child's name that the owner does not own", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "w-old", nil)
		err := newJanitor(w).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-old", Namespace: ns}})
		expectNotOwned(err, "Delete")
		expectTenantKept(ctx, ns, "w-old")
	})

	It("deletes a child the owner owns by name", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)
		ensure(ctx, j, ns, "w-old")
		Expect(j.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-old", Namespace: ns}})).To(Succeed())
		Expect(exists(ctx, ns, "w-old")).To(BeFalse())
	})

	It("deletes only the owner's children in a DeleteAllOf", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)
		ensure(ctx, j, ns, "mine")
		tenantObject(ctx, ns, "theirs", nil)
		// A copied owner-uid label alone does not make an object a child.
		tenantObject(ctx, ns, "copied-uid", map[string]string{labels.OwnerUID: string(w.UID)})
		Expect(j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))).To(Succeed())
		Expect(exists(ctx, ns, "mine")).To(BeFalse(), "the owner's child is still there")
		expectTenantKept(ctx, ns, "theirs")
		expectTenantKept(ctx, ns, "copied-uid")
	})

	It("does not apply over an object of the child's name that the owner does not own", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", nil)
		ac := corev1ac.ConfigMap("child", ns).WithData(map[string]string{"k": "v"})
		err := newJanitor(w).Apply(ctx, ac, client.FieldOwner("widget"), client.ForceOwnership)
		expectNotOwned(err, "Apply")
		expectTenantKept(ctx, ns, "child")
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, got)).To(Succeed())
		Expect(got.Labels).NotTo(HaveKey(labels.OwnerUID), "the tenant's object was marked as the owner's")
	})

	It("marks and records a child it applies, so that a later pass sweeps it once it is withdrawn", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		ac := corev1ac.ConfigMap("applied", ns).WithData(map[string]string{"k": "v"})
		Expect(j.Apply(ctx, ac, client.FieldOwner("widget"))).To(Succeed())
		_, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "applied"}, got)).To(Succeed(), "the pass that applied it swept it")
		Expect(j.Owns(got)).To(BeTrue(), "an applied child carries no ownership")
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))

		// A later pass that no longer applies it sweeps it.
		later := newJanitor(w)
		Expect(later.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err = later.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "applied")).To(BeFalse(), "a withdrawn applied child was left behind")
	})

	It("does not write the status of an object of the child's name that the owner does not own", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		// The status of a tenant's object (a Widget of theirs) is theirs.
		other := owner(ctx, ns, "tenants-widget")
		other.Status.ChildCount = 7
		j := newJanitor(w)
		err := j.Status().Update(ctx, other)
		expectNotOwned(err, "Status().Update")
		err = j.Status().Patch(ctx, other, client.Merge)
		expectNotOwned(err, "Status().Patch")
		got := other.DeepCopy()
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(other), got)).To(Succeed())
		Expect(got.Status.ChildCount).To(BeZero(), "the tenant's status was written")
	})
})

// A cache may lag behind the API server: what the janitor read of a child
// must still hold when its write lands.
var _ = Describe("Writes by name over a read that lags behind", func() {
	// lagging returns a janitor of w whose reads of name answer with stale
	// (nil: as if there were none) while the API server holds the object
	// of now.
	lagging := func(w client.Object, name string, stale *corev1.ConfigMap) *janitor.Client {
		GinkgoHelper()
		direct, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		c := interceptor.NewClient(direct, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if key.Name != name {
					return c.Get(ctx, key, obj, opts...)
				}
				if stale == nil {
					return apierrors.NewNotFound(corev1.Resource("configmaps"), name)
				}
				cm, ok := obj.(*corev1.ConfigMap)
				Expect(ok).To(BeTrue(), "read into %T", obj)
				stale.DeepCopyInto(cm)
				return nil
			},
		})
		j, err := janitor.New(scoped.New(c, "dev"), w, janitor.WithLiveReader(direct))
		Expect(err).NotTo(HaveOccurred())
		return j
	}
	// replaceWithTenants deletes the owner's child name and puts a tenant's
	// object in its place, and returns the child as it was.
	replaceWithTenants := func(ctx context.Context, ns, name string) *corev1.ConfigMap {
		GinkgoHelper()
		child := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, child)).To(Succeed())
		Expect(cp.Client.Delete(ctx, child)).To(Succeed())
		tenantObject(ctx, ns, name, nil)
		return child
	}

	It("applies over the owner's child again and again, changing what it holds", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		for _, v := range []string{"one", "two", "two"} {
			ac := corev1ac.ConfigMap("child", ns).WithData(map[string]string{"k": v})
			Expect(newJanitor(w).Apply(ctx, ac, client.FieldOwner("widget"))).To(Succeed())
			got := &corev1.ConfigMap{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, got)).To(Succeed())
			Expect(got.Data).To(Equal(map[string]string{"k": v}))
		}
	})

	It("does not apply over a tenant's object put in place of the child after the read", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")
		stale := replaceWithTenants(ctx, ns, "child")
		ac := corev1ac.ConfigMap("child", ns).WithData(map[string]string{"k": "v"})
		err := lagging(w, "child", stale).Apply(ctx, ac, client.FieldOwner("widget"), client.ForceOwnership)
		Expect(err).To(HaveOccurred(), "an apply over a stale read of the child went through")
		expectTenantKept(ctx, ns, "child")
	})

	It("does not delete a tenant's object put in place of the child after the read", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")
		stale := replaceWithTenants(ctx, ns, "child")
		err := lagging(w, "child", stale).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}})
		Expect(err).To(HaveOccurred(), "a delete over a stale read of the child went through")
		expectTenantKept(ctx, ns, "child")
	})

	It("applies over the owner's child that the read has not seen yet, after reading it live", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")
		ac := corev1ac.ConfigMap("child", ns).WithData(map[string]string{"k": "new"})
		Expect(lagging(w, "child", nil).Apply(ctx, ac, client.FieldOwner("widget"), client.ForceOwnership)).To(Succeed())
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, got)).To(Succeed())
		Expect(got.Data).To(Equal(map[string]string{"k": "new"}))
	})

	It("does not apply over a tenant's object that the read has not seen yet", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", nil)
		ac := corev1ac.ConfigMap("child", ns).WithData(map[string]string{"k": "v"})
		err := lagging(w, "child", nil).Apply(ctx, ac, client.FieldOwner("widget"), client.ForceOwnership)
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "got %v", err)
		expectTenantKept(ctx, ns, "child")
	})
})
