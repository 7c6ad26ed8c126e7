package janitor_test

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// An owner whose environment label changes (dev to prod) is reconciled by
// the janitor of its new environment, to which the children it wrote
// before look absent: CreateOrUpdate must move them, not fail on the
// name for ever.
var _ = Describe("CreateOrUpdate after the owner changed environment", func() {
	It("moves the owner's child written under its earlier environment into the new one", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")

		prod, err := janitor.New(scoped.New(cp.Client, "prod"), w)
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}}
		res, err := prod.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"k": "moved"}; return nil })
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(Equal(controllerutil.OperationResultUpdated))
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "prod"))
		Expect(got.Data).To(Equal(map[string]string{"k": "moved"}))
		Expect(prod.Owns(got)).To(BeTrue())

		// Recorded as touched: the new environment's cleanup keeps it.
		Expect(prod.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err = prod.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "child")).To(BeTrue())
	})

	It("names an object of another environment that the owner does not own as in the way, and leaves it", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", nil) // in dev
		prod, err := janitor.New(scoped.New(cp.Client, "prod"), w)
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}}
		_, err = prod.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"k": "v"}; return nil })
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "got %v", err)
		expectTenantKept(ctx, ns, "child")
	})
})
