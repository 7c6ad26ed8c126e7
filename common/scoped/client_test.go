package scoped_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

var _ = Describe("Client", func() {
	It("labels what it writes and sees only its environment", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		dev, prod := scoped.New(cp.Client, "dev"), scoped.New(cp.Client, "prod")
		Expect(dev.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: ns}})).To(Succeed())
		Expect(prod.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}})).To(Succeed())

		got := &corev1.ConfigMap{}
		Expect(dev.Get(ctx, client.ObjectKey{Namespace: ns, Name: "d"}, got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))
		Expect(apierrors.IsNotFound(dev.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, got))).To(BeTrue())

		list := &corev1.ConfigMapList{}
		Expect(dev.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("d"))

		err := dev.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}})
		Expect(apierrors.IsNotFound(err)).To(BeTrue())
		Expect(exists(ctx, ns, "p")).To(BeTrue())
	})

	It("keeps a caller's label selector and adds the environment to it", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		dev := scoped.New(cp.Client, "dev")
		for _, name := range []string{"a", "b"} {
			Expect(dev.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{"app": name}}})).To(Succeed())
		}
		list := &corev1.ConfigMapList{}
		Expect(dev.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app": "b"})).To(Succeed())
		Expect(names(list)).To(ConsistOf("b"))
	})

	It("server-side applies with the environment label", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		dev := scoped.New(cp.Client, "dev")
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "applied", "namespace": ns}, "data": map[string]any{"x": "1"}}}
		Expect(dev.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("test"))).To(Succeed())
		got := &corev1.ConfigMap{}
		Expect(dev.Get(ctx, client.ObjectKey{Namespace: ns, Name: "applied"}, got)).To(Succeed())
		Expect(got.Data).To(HaveKeyWithValue("x", "1"))
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))
	})

	It("creates or updates within its environment and deletes in bulk only there", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"other": "prod"})
		dev := scoped.New(cp.Client, "dev")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cu", Namespace: ns}}
		_, err := dev.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"v": "1"}; return nil })
		Expect(err).NotTo(HaveOccurred())
		_, err = dev.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"v": "2"}; return nil })
		Expect(err).NotTo(HaveOccurred())
		got := &corev1.ConfigMap{}
		Expect(dev.Get(ctx, client.ObjectKeyFromObject(cm), got)).To(Succeed())
		Expect(got.Data).To(HaveKeyWithValue("v", "2"))
		Expect(dev.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))).To(Succeed())
		Expect(exists(ctx, ns, "cu")).To(BeFalse())
		Expect(exists(ctx, ns, "other")).To(BeTrue())
	})

	It("never adopts an object of the same name in another environment", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"taken": "prod"})
		dev := scoped.New(cp.Client, "dev")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns}}
		_, err := dev.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"v": "mine"}; return nil })
		Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "got %v", err)
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "prod"))
		Expect(got.Data).To(BeEmpty())
	})
})

var _ = Describe("Client for the default environment", func() {
	It("sees objects without the label beside its own, but no other environment's", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"mine": "dev", "other": "prod", "unlabelled": unlabelled})
		def := scoped.NewDefault(cp.Client, "dev")
		list := &corev1.ConfigMapList{}
		Expect(def.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("mine", "unlabelled"))
		Expect(def.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unlabelled"}, &corev1.ConfigMap{})).To(Succeed())
		Expect(apierrors.IsNotFound(def.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &corev1.ConfigMap{}))).To(BeTrue())

		strict := scoped.New(cp.Client, "dev")
		Expect(strict.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("mine"))
		Expect(apierrors.IsNotFound(strict.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unlabelled"}, &corev1.ConfigMap{}))).To(BeTrue())
	})

	// An empty label value names no environment: it is the same as no label,
	// for the Controller and for this client alike. Otherwise whoever may
	// edit a child's labels could hide it from the default environment (its
	// owner's reconcile would not see it, its owner's deletion would leave it
	// behind) by emptying the label, while the Controller still reconciles
	// an owner with the same empty label in the default environment.
	It("treats an empty label like no label", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"mine": "dev", "empty": "", "unlabelled": unlabelled})
		def := scoped.NewDefault(cp.Client, "dev")
		list := &corev1.ConfigMapList{}
		Expect(def.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("mine", "empty", "unlabelled"))
		Expect(def.Get(ctx, client.ObjectKey{Namespace: ns, Name: "empty"}, &corev1.ConfigMap{})).To(Succeed())

		strict := scoped.New(cp.Client, "dev")
		Expect(strict.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("mine"))
		Expect(apierrors.IsNotFound(strict.Get(ctx, client.ObjectKey{Namespace: ns, Name: "empty"}, &corev1.ConfigMap{}))).To(BeTrue())
	})

	It("deletes in bulk only what carries its label, never unlabelled objects", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"mine": "dev", "other": "prod", "empty": "", "unlabelled": unlabelled})
		Expect(scoped.NewDefault(cp.Client, "dev").DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))).To(Succeed())
		Expect(exists(ctx, ns, "mine")).To(BeFalse())
		for _, name := range []string{"other", "empty", "unlabelled"} {
			Expect(exists(ctx, ns, name)).To(BeTrue(), name)
		}
	})

	It("labels what it writes, also an object that was unlabelled", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"unlabelled": unlabelled})
		def := scoped.NewDefault(cp.Client, "dev")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled", Namespace: ns}}
		_, err := def.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"v": "1"}; return nil })
		Expect(err).NotTo(HaveOccurred())
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))
	})
})

var _ = Describe("AnyEnvironment", func() {
	It("reads and deletes in every environment and leaves labels as they are", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		configMaps(ctx, ns, map[string]string{"d": "dev", "p": "prod", "empty": "", "unlabelled": unlabelled})
		anyEnv := scoped.AnyEnvironment(cp.Client)
		list := &corev1.ConfigMapList{}
		Expect(anyEnv.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(names(list)).To(ConsistOf("d", "p", "empty", "unlabelled"))

		got := &corev1.ConfigMap{}
		Expect(anyEnv.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, got)).To(Succeed())
		got.Data = map[string]string{"v": "1"}
		Expect(anyEnv.Update(ctx, got)).To(Succeed())
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue(labels.Environment, "prod"))

		Expect(anyEnv.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled", Namespace: ns}})).To(Succeed())
		Expect(exists(ctx, ns, "unlabelled")).To(BeFalse())
		Expect(anyEnv.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))).To(Succeed())
		Expect(cp.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(BeEmpty())
	})
})

var _ = Describe("EnvironmentOf", func() {
	// The oracle: the environment EnvironmentOf names is the one client that
	// sees the object; every other environment's client does not.
	DescribeTable("names the one environment whose client sees the object",
		func(ctx context.Context, label, defaultEnv, want string) {
			ns := cp.Namespace(ctx)
			configMaps(ctx, ns, map[string]string{"o": label})
			obj := &corev1.ConfigMap{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "o"}, obj)).To(Succeed())
			env, ok := scoped.EnvironmentOf(obj, defaultEnv)
			Expect(ok).To(Equal(want != ""))
			Expect(env).To(Equal(want))
			for _, e := range []string{"dev", "prod"} {
				c := scoped.For(cp.Client, e, defaultEnv)
				err := c.Get(ctx, client.ObjectKeyFromObject(obj), &corev1.ConfigMap{})
				if e == want {
					Expect(err).NotTo(HaveOccurred(), e)
					Expect(c.InScope(obj)).To(BeTrue(), e)
				} else {
					Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", e, err)
					Expect(c.InScope(obj)).To(BeFalse(), e)
				}
				list := &corev1.ConfigMapList{}
				Expect(c.List(ctx, list, client.InNamespace(ns))).To(Succeed())
				Expect(list.Items).To(HaveLen(map[bool]int{true: 1, false: 0}[e == want]), e)
			}
		},
		Entry("labelled, no default", "prod", "", "prod"),
		Entry("labelled, other default", "prod", "dev", "prod"),
		Entry("unlabelled, no default", unlabelled, "", ""),
		Entry("unlabelled, default", unlabelled, "dev", "dev"),
		Entry("empty label, no default", "", "", ""),
		Entry("empty label, default", "", "dev", "dev"),
	)
})
