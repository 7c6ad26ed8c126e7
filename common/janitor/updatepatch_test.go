package janitor_test

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
)

// tenantObject creates a ConfigMap a tenant made on their own, in
// environment dev, with their own data.
func tenantObject(ctx context.Context, ns, name string, extra map[string]string) {
	l := map[string]string{labels.Environment: "dev"}
	for k, v := range extra {
		l[k] = v
	}
	Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Data: map[string]string{"tenant": "data"}})).To(Succeed())
}

// expectTenantKept checks that the tenant's object is there, unchanged and
// not marked as anyone's child.
func expectTenantKept(ctx context.Context, ns, name string) {
	got := &corev1.ConfigMap{}
	Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got)).To(Succeed(), "the tenant's object is gone")
	Expect(got.Data).To(Equal(map[string]string{"tenant": "data"}), "the tenant's object was written over")
	Expect(got.OwnerReferences).To(BeEmpty(), "the tenant's object was adopted")
}

// Update and Patch check, as CreateOrUpdate does, that the object under
// the child's name is the owner's: a tenant's object of that name is never
// written over, adopted, or later swept as a stale child.
var _ = Describe("Objects in the way of a child, written by Update and Patch", func() {
	It("does not update over an object of the child's name that the owner does not own", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", nil)
		j := newJanitor(w)
		cm := &corev1.ConfigMap{}
		Expect(j.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, cm)).To(Succeed())
		cm.Data = map[string]string{"k": "v"}
		err := j.Update(ctx, cm)
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "Update of a foreign object: got %v", err)
		expectTenantKept(ctx, ns, "child")
	})

	It("does not patch an object of the child's name that the owner does not own", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", nil)
		j := newJanitor(w)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}, Data: map[string]string{"k": "v"}}
		err := j.Patch(ctx, cm, client.Merge)
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "Patch of a foreign object: got %v", err)
		expectTenantKept(ctx, ns, "child")
	})

	It("does not later sweep a foreign object that a write went over", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", nil)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}}
		_ = newJanitor(w).Patch(ctx, cm, client.Merge)

		later := newJanitor(w)
		Expect(later.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err := later.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "child")).To(BeTrue(), "the tenant's object was deleted as a stale child")
	})
})

var _ = Describe("Owner references that are not the controller's", func() {
	It("does not treat an owner reference that is not the controller's as ownership", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ref", Namespace: ns,
			Labels:          map[string]string{labels.Environment: "dev", labels.OwnerUID: string(w.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "test.trustplane.dev/v1", Kind: "Widget", Name: "w", UID: w.UID}}}}
		Expect(cp.Client.Create(ctx, cm)).To(Succeed())
		j := newJanitor(w)
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "ref")).To(BeTrue())
	})
})
