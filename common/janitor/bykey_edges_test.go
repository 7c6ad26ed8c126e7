package janitor_test

// Covers the janitor's writes by name added in bykey.go (Apply, Delete)
// and the environment move of CreateOrUpdate: Apply of a cluster-scoped
// child of a namespaced owner, of a child in another namespace (no owner
// reference possible), of a kind the client's scheme does not know
// (unstructured path); a Delete whose caller gives its own precondition;
// the environment move meeting a tenant's object that copies only the
// owner-uid label.

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

var _ = Describe("Apply of children the owner cannot reference", func() {
	It("applies a cluster-scoped child of a namespaced owner again and again, and sweeps it once withdrawn", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		name := ns + "-remote-cr"
		for _, verb := range []string{"get", "list", "get"} {
			j := newJanitor(w)
			Expect(j.Declare(&rbacv1.ClusterRoleList{})).To(Succeed())
			ac := rbacv1ac.ClusterRole(name).WithRules(rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("configmaps").WithVerbs(verb))
			Expect(j.Apply(ctx, ac, client.FieldOwner("widget"))).To(Succeed(), "apply with verb %s", verb)
			_, err := j.Cleanup(ctx)
			Expect(err).NotTo(HaveOccurred())
			got := &rbacv1.ClusterRole{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, got)).To(Succeed())
			Expect(got.Rules[0].Verbs).To(Equal([]string{verb}))
			Expect(j.Owns(got)).To(BeTrue())
		}
		later := newJanitor(w)
		Expect(later.Declare(&rbacv1.ClusterRoleList{})).To(Succeed())
		_, err := later.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		err = cp.Client.Get(ctx, client.ObjectKey{Name: name}, &rbacv1.ClusterRole{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a withdrawn cluster-scoped applied child was left behind: %v", err)
	})

	It("applies a child in another namespace again and again, by owner labels alone", func(ctx context.Context) {
		ns, elsewhere := cp.Namespace(ctx), cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		for _, v := range []string{"one", "two"} {
			ac := corev1ac.ConfigMap("remote", elsewhere).WithData(map[string]string{"k": v})
			Expect(newJanitor(w).Apply(ctx, ac, client.FieldOwner("widget"))).To(Succeed())
		}
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: elsewhere, Name: "remote"}, got)).To(Succeed())
		Expect(got.Data).To(Equal(map[string]string{"k": "two"}))
		Expect(got.OwnerReferences).To(BeEmpty())
		Expect(newJanitor(w).Owns(got)).To(BeTrue())
	})
})

var _ = Describe("Apply of a kind the janitor's scheme does not know", func() {
	// janitorWithoutCore returns a janitor of w over a client whose scheme
	// knows Widgets only: ConfigMaps go the unstructured way.
	janitorWithoutCore := func(w *widgetv1.Widget) *janitor.Client {
		GinkgoHelper()
		s := kruntime.NewScheme()
		Expect(widgetv1.AddToScheme(s)).To(Succeed())
		c, err := client.New(cp.Config, client.Options{Scheme: s})
		Expect(err).NotTo(HaveOccurred())
		j, err := janitor.New(scoped.New(c, "dev"), w)
		Expect(err).NotTo(HaveOccurred())
		return j
	}
	cmList := func() *unstructured.UnstructuredList {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion("v1")
		l.SetKind("ConfigMapList")
		return l
	}

	It("applies over its own child, refuses a tenant's, and sweeps the child once withdrawn", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		for _, v := range []string{"one", "two"} {
			j := janitorWithoutCore(w)
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			u.SetNamespace(ns)
			u.SetName("loose")
			Expect(unstructured.SetNestedStringMap(u.Object, map[string]string{"k": v}, "data")).To(Succeed())
			Expect(j.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("widget"))).To(Succeed())
		}
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "loose"}, got)).To(Succeed())
		Expect(got.Data).To(Equal(map[string]string{"k": "two"}))

		tenantObject(ctx, ns, "tenants", nil)
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace(ns)
		u.SetName("tenants")
		err := janitorWithoutCore(w).Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("widget"), client.ForceOwnership)
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "got %v", err)
		expectTenantKept(ctx, ns, "tenants")

		later := janitorWithoutCore(w)
		Expect(later.Declare(cmList())).To(Succeed())
		_, err = later.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "loose")).To(BeFalse())
		expectTenantKept(ctx, ns, "tenants")
	})
})

var _ = Describe("Delete with the caller's own precondition", func() {
	It("keeps the caller's UID precondition: a newer child of the name is not deleted in place of the one meant", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)
		ensure(ctx, j, ns, "child")
		first := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, first)).To(Succeed())
		Expect(cp.Client.Delete(ctx, first)).To(Succeed())
		ensure(ctx, j, ns, "child") // a new child, another UID
		meant := first.UID
		err := newJanitor(w).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}},
			client.Preconditions{UID: &meant})
		Expect(err).To(HaveOccurred(), "the delete meant for UID %s went through", meant)
		Expect(exists(ctx, ns, "child")).To(BeTrue(), "the newer child was deleted in place of UID %s", meant)
	})
})

var _ = Describe("the environment move of CreateOrUpdate and a copied owner-uid label", func() {
	It("does not move a tenant's object of another environment that copies the owner-uid label only", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		tenantObject(ctx, ns, "child", map[string]string{labels.OwnerUID: string(w.UID)}) // in dev
		prod, err := janitor.New(scoped.New(cp.Client, "prod"), w)
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: ns}}
		_, err = prod.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"k": "v"}; return nil })
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "got %v", err)
		expectTenantKept(ctx, ns, "child")
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))
	})
})

// Covers the sweep of stale children (Cleanup), which reads every
// environment and deletes through the unscoped client: a child a tenant
// disowned (took its owner labels and reference off and made it theirs)
// after the cache read must not be deleted on the strength of that stale
// read (a UID precondition alone let it through).
var _ = Describe("A sweep over a lagging read of a child the tenant since made theirs", func() {
	It("does not delete the tenant's object", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")
		stale := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, stale)).To(Succeed())

		// The tenant, who may update ConfigMaps here, makes it theirs.
		mine := stale.DeepCopy()
		mine.OwnerReferences = nil
		mine.Labels = map[string]string{labels.Environment: "dev"}
		mine.Annotations = nil
		mine.Data = map[string]string{"tenant": "data"}
		Expect(cp.Client.Update(ctx, mine)).To(Succeed())

		// A cache that has not seen the tenant's update yet.
		direct, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		lagging := interceptor.NewClient(direct, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if cm, ok := obj.(*corev1.ConfigMap); ok && key.Name == "child" {
					stale.DeepCopyInto(cm)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if l, ok := list.(*corev1.ConfigMapList); ok {
					l.Items = []corev1.ConfigMap{*stale.DeepCopy()}
					return nil
				}
				return c.List(ctx, list, opts...)
			},
		})
		j, err := janitor.New(scoped.New(lagging, "dev"), w)
		Expect(err).NotTo(HaveOccurred())
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, _ = j.Cleanup(ctx)
		expectTenantKept(ctx, ns, "child")
	})
})
