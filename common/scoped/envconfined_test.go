package scoped_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

var _ = Describe("Client confined to its environment, on deletes and reads", func() {
	// The client's reads may come from a cache that lags behind the API
	// server: the environment it checks before a delete must still hold
	// when the delete lands.
	It("does not delete an object that moved to another environment after the read it checked", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"moved": "dev"})
		stale := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "moved"}, stale)).To(Succeed())
		// Someone moves it to prod; the reader still shows the dev copy.
		moved := stale.DeepCopy()
		moved.Labels[labels.Environment] = "prod"
		Expect(cp.Client.Update(ctx, moved)).To(Succeed())

		direct, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		lagging := interceptor.NewClient(direct, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if key.Name == "moved" {
					stale.DeepCopyInto(obj.(*corev1.ConfigMap))
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		_ = scoped.New(lagging, "dev").Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "moved", Namespace: ns}})
		got := &corev1.ConfigMap{}
		err = cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "moved"}, got)
		Expect(err).NotTo(HaveOccurred(), "dev's client deleted an object of prod")
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "prod"))
	})

	It("does not let a look-alike environment name match by prefix", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"a": "prod", "b": "prod-eu", "c": "pro"})
		prod := scoped.New(cp.Client, "prod")
		list := &corev1.ConfigMapList{}
		Expect(prod.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("a"))
		for _, n := range []string{"b", "c"} {
			Expect(apierrors.IsNotFound(prod.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &corev1.ConfigMap{}))).To(BeTrue(), n)
			Expect(apierrors.IsNotFound(prod.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}}))).To(BeTrue(), n)
		}
		Expect(prod.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))).To(Succeed())
		Expect(exists(ctx, ns, "a")).To(BeFalse())
		Expect(exists(ctx, ns, "b")).To(BeTrue())
		Expect(exists(ctx, ns, "c")).To(BeTrue())
	})
})
