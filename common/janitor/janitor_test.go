package janitor_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// cp is the suite's control plane.
var cp = testapi.NewSuite("j-")

func TestJanitor(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "janitor")
}

func owner(ctx context.Context, ns, name string) *widgetv1.Widget {
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labels.Environment: "dev"}}}
	Expect(cp.Client.Create(ctx, w)).To(Succeed())
	return w
}

func newJanitor(w *widgetv1.Widget) *janitor.Client {
	j, err := janitor.New(scoped.New(cp.Client, "dev"), w)
	Expect(err).NotTo(HaveOccurred())
	return j
}

func ensure(ctx context.Context, j *janitor.Client, ns, name string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	_, err := j.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"k": "v"}; return nil })
	Expect(err).NotTo(HaveOccurred())
}

func exists(ctx context.Context, ns, name string) bool {
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}

var _ = Describe("JanitorClient", func() {
	It("deletes owned children of a declared type that the reconcile did not touch", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		first := newJanitor(w)
		ensure(ctx, first, ns, "old")
		ensure(ctx, first, ns, "kept")

		second := newJanitor(w)
		ensure(ctx, second, ns, "kept")
		ensure(ctx, second, ns, "new")
		Expect(second.Declare(&corev1.ConfigMapList{})).To(Succeed())
		n, err := second.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Expect(exists(ctx, ns, "old")).To(BeFalse())
		Expect(exists(ctx, ns, "kept")).To(BeTrue())
		Expect(exists(ctx, ns, "new")).To(BeTrue())
	})

	It("failure mode 7: never deletes children of an undeclared type after an early return", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		ensure(ctx, newJanitor(w), ns, "child")

		early := newJanitor(w) // the handler returned before it touched or declared ConfigMaps
		n, err := early.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeZero())
		Expect(exists(ctx, ns, "child")).To(BeTrue())
	})

	It("failure mode 7: never deletes a foreign object, even one with a matching name or environment", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns,
			Labels: map[string]string{labels.Environment: "dev"}}}
		Expect(cp.Client.Create(ctx, foreign)).To(Succeed())
		other := owner(ctx, ns, "other")
		ensure(ctx, newJanitor(other), ns, "others-child")

		j := newJanitor(w)
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		n, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeZero())
		Expect(exists(ctx, ns, "foreign")).To(BeTrue())
		Expect(exists(ctx, ns, "others-child")).To(BeTrue())
	})

	It("owns no object whose owner labels name its UID and kind but another owner's namespace or name", func(ctx context.Context) {
		ns, elsewhere := cp.Namespace(ctx), cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)
		forged := func(name string, l map[string]string) *corev1.ConfigMap {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: name, Labels: map[string]string{
				labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.Environment: "dev"}}}
			maps.Copy(cm.Labels, l)
			Expect(cp.Client.Create(ctx, cm)).To(Succeed())
			return cm
		}
		otherNamespace := forged("other-namespace", map[string]string{labels.OwnerName: "w", labels.OwnerNamespace: "other"})
		otherName := forged("other-name", map[string]string{labels.OwnerName: "someone-else", labels.OwnerNamespace: ns})
		unnamed := forged("unnamed", nil)
		for _, cm := range []*corev1.ConfigMap{otherNamespace, otherName, unnamed} {
			Expect(j.Owns(cm)).To(BeFalse(), "%s: its labels do not parse to the owner %s/w", cm.Name, ns)
		}
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		n, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeZero())
		for _, cm := range []*corev1.ConfigMap{otherNamespace, otherName, unnamed} {
			Expect(exists(ctx, elsewhere, cm.Name)).To(BeTrue(), "%s was deleted as the owner's child", cm.Name)
		}
	})

	It("owns cross-namespace children by owner labels, where no owner reference is allowed", func(ctx context.Context) {
		ns, elsewhere := cp.Namespace(ctx), cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)
		ensure(ctx, j, elsewhere, "remote")
		cm := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: elsewhere, Name: "remote"}, cm)).To(Succeed())
		Expect(cm.OwnerReferences).To(BeEmpty())
		Expect(cm.Labels).To(HaveKeyWithValue(labels.OwnerUID, string(w.UID)))
		Expect(cm.Labels).To(HaveKeyWithValue(labels.OwnerKind, "Widget"))
		Expect(cm.Labels).To(HaveKeyWithValue(labels.OwnerName, "w"))
		Expect(cm.Labels).To(HaveKeyWithValue(labels.OwnerNamespace, ns))
		Expect(cm.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))
		Expect(j.Owns(cm)).To(BeTrue())

		later := newJanitor(w)
		Expect(later.Declare(&corev1.ConfigMapList{})).To(Succeed())
		n, err := later.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Expect(exists(ctx, elsewhere, "remote")).To(BeFalse())
	})

	It("does not adopt an object of the same name that it did not create", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns}})).To(Succeed())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns}}
		_, err := newJanitor(w).CreateOrUpdate(ctx, cm, func() error { return nil })
		var notOwned *janitor.NotOwnedError
		Expect(errors.As(err, &notOwned)).To(BeTrue(), "got %v", err)
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "taken"}, got)).To(Succeed())
		Expect(got.Labels).To(BeEmpty(), "the object was marked")
	})

	It("travels in the context", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		j := newJanitor(owner(ctx, ns, "w"))
		Expect(janitor.FromContext(janitor.IntoContext(ctx, j))).To(BeIdenticalTo(j))
		Expect(janitor.FromContext(ctx)).To(BeNil())
	})
})

var _ = Describe("JanitorClient writes", func() {
	It("records Create, Update, Patch and Keep as touched, so Cleanup spares them", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		seed := newJanitor(w)
		for _, name := range []string{"updated", "patched", "kept", "stale"} {
			ensure(ctx, seed, ns, name)
		}

		j := newJanitor(w)
		Expect(j.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "created", Namespace: ns}})).To(Succeed())
		upd := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "updated"}, upd)).To(Succeed())
		upd.Data = map[string]string{"k": "changed"}
		Expect(j.Update(ctx, upd)).To(Succeed())
		pat := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "patched"}, pat)).To(Succeed())
		before := pat.DeepCopy()
		pat.Data = map[string]string{"k": "patched"}
		Expect(j.Patch(ctx, pat, client.MergeFrom(before))).To(Succeed())
		kept := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, kept)).To(Succeed())
		j.Keep(kept)

		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		n, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Expect(exists(ctx, ns, "stale")).To(BeFalse())
		for _, name := range []string{"created", "updated", "patched", "kept"} {
			Expect(exists(ctx, ns, name)).To(BeTrue(), name)
		}
		created := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "created"}, created)).To(Succeed())
		Expect(metav1.IsControlledBy(created, w)).To(BeTrue())
	})

	It("rejects a type the scheme does not know", func(ctx context.Context) {
		j := newJanitor(owner(ctx, cp.Namespace(ctx), "w"))
		Expect(j.Declare(&unknownList{})).To(MatchError(ContainSubstring("declare cleanup type")))
	})
})

var _ = Describe("Live child types", func() {
	// child creates a ConfigMap labelled as w's child in environment env, as
	// a pass would have written it while w carried that label.
	child := func(ctx context.Context, w *widgetv1.Widget, name, env string) {
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace,
			Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerName: w.Name, labels.OwnerNamespace: w.Namespace, labels.Environment: env}}})).To(Succeed())
	}
	foreign := func(ctx context.Context, ns, name, env string) {
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{labels.OwnerUID: "someone-else", labels.Environment: env}}})).To(Succeed())
	}
	live := janitor.ChildType{List: &corev1.ConfigMapList{}, Live: true}

	It("withdraws the owner's children in every environment and confirms their absence", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		child(ctx, w, "here", "dev")
		child(ctx, w, "earlier", "prod")
		foreign(ctx, ns, "theirs", "prod")

		gone, err := newJanitor(w).Withdraw(ctx, live)
		Expect(err).NotTo(HaveOccurred())
		Expect(gone).To(BeTrue(), "nothing held them: the second read confirms them gone")
		Expect(exists(ctx, ns, "here")).To(BeFalse())
		Expect(exists(ctx, ns, "earlier")).To(BeFalse())
		Expect(exists(ctx, ns, "theirs")).To(BeTrue())
	})

	It("reports a Live child a finalizer holds as not gone, until it is", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns, Finalizers: []string{"test.trustplane.dev/hold"},
			Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerName: w.Name, labels.OwnerNamespace: w.Namespace, labels.Environment: "dev"}}}
		Expect(cp.Client.Create(ctx, held)).To(Succeed())
		gone, err := newJanitor(w).Withdraw(ctx, live)
		Expect(err).NotTo(HaveOccurred())
		Expect(gone).To(BeFalse())

		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
		Expect(held.DeletionTimestamp).NotTo(BeNil())
		held.Finalizers = nil
		Expect(cp.Client.Update(ctx, held)).To(Succeed())
		gone, err = newJanitor(w).Withdraw(ctx, live)
		Expect(err).NotTo(HaveOccurred())
		Expect(gone).To(BeTrue())
	})

	It("never deletes an object that copies the owner's UID label without its kind", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "copied", Namespace: ns,
			Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.Environment: "dev"}}})).To(Succeed())
		j := newJanitor(w)
		Expect(j.Declare(&corev1.ConfigMapList{})).To(Succeed())
		_, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, err = newJanitor(w).Withdraw(ctx, live)
		Expect(err).NotTo(HaveOccurred())
		Expect(exists(ctx, ns, "copied")).To(BeTrue())
	})

	It("withdraws the children of a type that is not Live in every environment too, without confirming", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		child(ctx, w, "earlier", "prod")
		foreign(ctx, ns, "theirs", "prod")
		gone, err := newJanitor(w).Withdraw(ctx, janitor.ChildType{List: &corev1.ConfigMapList{}})
		Expect(err).NotTo(HaveOccurred())
		Expect(gone).To(BeTrue(), "only Live types wait for confirmation")
		Eventually(func() bool { return exists(ctx, ns, "earlier") }).Should(BeFalse())
		Expect(exists(ctx, ns, "theirs")).To(BeTrue())
	})

	It("WithdrawAll withdraws the children this pass wrote or kept too", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		child(ctx, w, "earlier", "dev")
		j, err := janitor.New(scoped.New(cp.Client, "dev"), w, janitor.WithLiveReader(cp.Client))
		Expect(err).NotTo(HaveOccurred())
		ensure(ctx, j, ns, "written")
		kept := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "earlier"}, kept)).To(Succeed())
		j.Keep(kept)
		gone, err := j.WithdrawAll(ctx, live)
		Expect(err).NotTo(HaveOccurred())
		Expect(gone).To(BeTrue())
		Expect(exists(ctx, ns, "written")).To(BeFalse())
		Expect(exists(ctx, ns, "earlier")).To(BeFalse())
	})

	It("spares the Live children this pass wrote", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		child(ctx, w, "stale", "prod")
		j := newJanitor(w)
		ensure(ctx, j, ns, "current")
		Expect(j.DeclareTypes(live)).To(Succeed())
		n, err := j.Cleanup(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Expect(exists(ctx, ns, "stale")).To(BeFalse())
		Expect(exists(ctx, ns, "current")).To(BeTrue())
	})
})

var _ = Describe("Objects in the way of a child", func() {
	// inTheWay creates ConfigMap ns/name in environment dev with labels
	// added, as someone else than the owner would.
	inTheWay := func(ctx context.Context, ns, name string, add map[string]string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{labels.Environment: "dev"}}, Data: map[string]string{"theirs": "x"}}
		for k, v := range add {
			cm.Labels[k] = v
		}
		Expect(cp.Client.Create(ctx, cm)).To(Succeed())
		return cm
	}
	unchanged := func(ctx context.Context, cm *corev1.ConfigMap) {
		cur := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), cur)).To(Succeed())
		Expect(cur.ResourceVersion).To(Equal(cm.ResourceVersion), "the object in the way was written")
	}

	It("CreateOrUpdate leaves an object of its environment that the owner does not own as it is", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		cm := inTheWay(ctx, ns, "taken", nil)
		copied := inTheWay(ctx, ns, "copied", map[string]string{labels.OwnerUID: string(w.UID)})
		for _, o := range []*corev1.ConfigMap{cm, copied} {
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: ns}}
			_, err := newJanitor(w).CreateOrUpdate(ctx, obj, func() error { obj.Data = map[string]string{"ours": "y"}; return nil })
			var notOwned *janitor.NotOwnedError
			Expect(errors.As(err, &notOwned)).To(BeTrue(), "got %v", err)
			Expect(notOwned.Key).To(Equal(client.ObjectKeyFromObject(o)))
			unchanged(ctx, o)
		}
	})
})

var _ = Describe("Claim", func() {
	It("tells an absent name, a child in any environment and an object in the way apart", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		j := newJanitor(w)

		found, err := j.Claim(ctx, client.ObjectKey{Namespace: ns, Name: "absent"}, &corev1.ConfigMap{})
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeFalse())

		By("a child written while the owner carried another environment label")
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "moved", Namespace: ns,
			Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerName: w.Name, labels.OwnerNamespace: w.Namespace, labels.Environment: "prod"}}})).To(Succeed())
		cm := &corev1.ConfigMap{}
		found, err = j.Claim(ctx, client.ObjectKey{Namespace: ns, Name: "moved"}, cm)
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue())
		Expect(j.Marked(cm)).To(BeFalse(), "another environment's label and no owner reference")
		Expect(j.Update(ctx, cm)).To(Succeed())
		Expect(j.Marked(cm)).To(BeTrue())
		Expect(cm.Labels).To(HaveKeyWithValue(labels.Environment, "dev"))

		By("objects in the way: no owner labels, a copied owner-uid label, another environment's")
		for name, l := range map[string]map[string]string{
			"plain":  {labels.Environment: "dev"},
			"copied": {labels.Environment: "dev", labels.OwnerUID: string(w.UID)},
			"prod":   {labels.Environment: "prod"},
		} {
			Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l}})).To(Succeed())
			found, err = j.Claim(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
			Expect(found).To(BeTrue())
			var notOwned *janitor.NotOwnedError
			Expect(errors.As(err, &notOwned)).To(BeTrue(), "%s: got %v", name, err)
			Expect(notOwned.Error()).To(Equal(fmt.Sprintf("ConfigMap %s/%s exists and is not a child of Widget %s/w; it is left untouched", ns, name, ns)))
		}
	})
})
