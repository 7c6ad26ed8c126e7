package janitor_test

import (
	"context"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// blindCache is a cache that has seen nothing yet: its lists come back
// empty, while its writes reach the real API server. It stands for an
// informer lagging behind a child just written.
type blindCache struct{ client.Client }

func (b blindCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	return meta.SetList(list, []runtime.Object{})
}

// countingReader reads through the real API server and counts its lists.
type countingReader struct {
	client.Reader
	lists *atomic.Int32
}

func (c countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists.Add(1)
	return c.Reader.List(ctx, list, opts...)
}

// afterList reads through the real API server and runs then after each
// list has returned.
type afterList struct {
	client.Reader
	then func()
}

func (a afterList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := a.Reader.List(ctx, list, opts...)
	a.then()
	return err
}

// slowCreate holds each Create until release is closed, after closing
// sent (the request is on its way), and then reports that its client gave
// up although the server took it; landed is closed once it has.
type slowCreate struct {
	client.Client
	sent, release, landed chan struct{}
}

func (s slowCreate) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	close(s.sent)
	<-s.release
	err := s.Client.Create(ctx, obj, opts...)
	close(s.landed)
	if err != nil {
		return err
	}
	return context.DeadlineExceeded
}

var _ = Describe("Confirmed absence of Live children", func() {
	live := janitor.ChildType{List: &corev1.ConfigMapList{}, Live: true}
	child := func(ctx context.Context, w *widgetv1.Widget, name string) {
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace,
			Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerName: w.Name, labels.OwnerNamespace: w.Namespace, labels.Environment: "dev"}}})).To(Succeed())
	}
	// pass returns the janitor of one pass of w, on cache, reading Live
	// children uncached through the real API server (counted in lists)
	// and sharing gone with the other passes.
	pass := func(w *widgetv1.Widget, cache client.Client, gone *janitor.ConfirmedGone, lists *atomic.Int32) *janitor.Client {
		j, err := janitor.New(scoped.New(cache, "dev"), w, janitor.WithLiveReader(countingReader{Reader: cp.Client, lists: lists}),
			janitor.WithConfirmedGone(gone))
		Expect(err).NotTo(HaveOccurred())
		return j
	}
	withdraw := func(ctx context.Context, j *janitor.Client, types ...janitor.ChildType) {
		gone, err := j.Withdraw(ctx, types...)
		Expect(err).NotTo(HaveOccurred())
		Expect(gone).To(BeTrue())
	}

	It("reads uncached only until the absence is confirmed, while no pass writes a child", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		child(ctx, w, "old")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		withdraw(ctx, pass(w, cp.Client, gone, lists), live)
		Expect(exists(ctx, w.Namespace, "old")).To(BeFalse())
		Expect(lists.Load()).To(BeEquivalentTo(2), "one read found the child, one confirmed it gone")
		Expect(gone.Len()).To(Equal(1))

		for range 3 {
			withdraw(ctx, pass(w, cp.Client, gone, lists), live)
		}
		Expect(lists.Load()).To(BeEquivalentTo(2), "the later passes trusted the confirmation")
	})

	It("finds a child written after the confirmation, though the cache has not seen it", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)

		ensure(ctx, pass(w, blindCache{cp.Client}, gone, lists), w.Namespace, "new")
		before := lists.Load()
		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)
		Expect(exists(ctx, w.Namespace, "new")).To(BeFalse(), "the child written since was left")
		Expect(lists.Load()).To(BeNumerically(">", before))
	})

	It("does not remember a pass that kept a child it wrote", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)

		j := pass(w, blindCache{cp.Client}, gone, lists)
		ensure(ctx, j, w.Namespace, "written")
		withdraw(ctx, j, live) // spares what it wrote
		Expect(exists(ctx, w.Namespace, "written")).To(BeTrue())
		Expect(gone.Len()).To(Equal(0))

		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)
		Expect(exists(ctx, w.Namespace, "written")).To(BeFalse())
	})

	It("does not vouch for a new owner under the same name, nor for other types", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		w := owner(ctx, ns, "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)

		By("a Live type the confirmation did not read")
		secrets := janitor.ChildType{List: &corev1.SecretList{}, Live: true}
		Expect(cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret", Namespace: ns,
			Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget", labels.OwnerName: w.Name, labels.OwnerNamespace: w.Namespace, labels.Environment: "dev"}}})).To(Succeed())
		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live, secrets)
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "secret"}, &corev1.Secret{})).NotTo(Succeed())

		By("the owner deleted and created again")
		Expect(cp.Client.Delete(ctx, w)).To(Succeed())
		again := owner(ctx, ns, "w")
		child(ctx, again, "of-the-new-one")
		withdraw(ctx, pass(again, blindCache{cp.Client}, gone, lists), live)
		Expect(exists(ctx, ns, "of-the-new-one")).To(BeFalse())
	})

	It("reads uncached again when the cache shows a child after all", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		withdraw(ctx, pass(w, cp.Client, gone, lists), live)
		before := lists.Load()

		child(ctx, w, "appeared")
		withdraw(ctx, pass(w, cp.Client, gone, lists), live)
		Expect(exists(ctx, w.Namespace, "appeared")).To(BeFalse())
		Expect(lists.Load()).To(BeNumerically(">", before), "the absence was confirmed again")
		Expect(gone.Len()).To(Equal(1))
	})

	It("ends the trust at any write or keep of a child, even one that fails", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		confirm := func() {
			withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)
			Expect(gone.Len()).To(Equal(1))
		}
		// Each write below leaves a child the blind cache does not show;
		// the next Withdraw must look for it uncached and delete it.
		for _, write := range []struct {
			name string
			do   func(j *janitor.Client, cm *corev1.ConfigMap) error
		}{
			{"Update", func(j *janitor.Client, cm *corev1.ConfigMap) error { return j.Update(ctx, cm) }},
			{"Patch", func(j *janitor.Client, cm *corev1.ConfigMap) error {
				return j.Patch(ctx, cm, client.MergeFrom(cm.DeepCopy()))
			}},
			{"Keep", func(j *janitor.Client, cm *corev1.ConfigMap) error { j.Keep(cm); return nil }},
		} {
			By(write.name)
			confirm()
			child(ctx, w, "kept")
			cm := &corev1.ConfigMap{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: "kept"}, cm)).To(Succeed())
			Expect(write.do(pass(w, blindCache{cp.Client}, gone, lists), cm)).To(Succeed())
			Expect(gone.Len()).To(Equal(0), "%s left the confirmation standing", write.name)
			withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)
			Expect(exists(ctx, w.Namespace, "kept")).To(BeFalse(), "%s: the child was left", write.name)
		}

		By("a create the API server refuses")
		confirm()
		bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "Not_A_Name"}}
		Expect(pass(w, blindCache{cp.Client}, gone, lists).Create(ctx, bad)).NotTo(Succeed())
		Expect(gone.Len()).To(Equal(0), "a write whose outcome the pass cannot know ends the trust before it is sent")
	})

	It("does not remember a confirmation another pass wrote a child during", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		// The confirming read of one pass returns, and before the pass
		// records it, another pass of the same owner writes a child.
		var once sync.Once
		racing := func() *janitor.Client {
			j, err := janitor.New(scoped.New(blindCache{cp.Client}, "dev"), w, janitor.WithConfirmedGone(gone),
				janitor.WithLiveReader(afterList{Reader: cp.Client, then: func() {
					once.Do(func() { ensure(ctx, pass(w, blindCache{cp.Client}, gone, lists), w.Namespace, "late") })
				}}))
			Expect(err).NotTo(HaveOccurred())
			return j
		}
		withdraw(ctx, racing(), live)
		Expect(exists(ctx, w.Namespace, "late")).To(BeTrue(), "written after the read")
		Expect(gone.Len()).To(Equal(0))

		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)
		Expect(exists(ctx, w.Namespace, "late")).To(BeFalse(), "a Withdraw trusted a confirmation that a write overtook")
	})

	It("does not trust a confirmation that a write overtook, even one whose client gave up", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		sc := slowCreate{Client: blindCache{cp.Client}, sent: make(chan struct{}), release: make(chan struct{}), landed: make(chan struct{})}

		// Another pass of w creates a child: its request is on its way
		// before the confirming read, and lands after it; its client gives
		// up (the create returns an error) though the server took it.
		writer, err := janitor.New(scoped.New(sc, "dev"), w, janitor.WithConfirmedGone(gone))
		Expect(err).NotTo(HaveOccurred())
		writerDone := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(writerDone)
			err := writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "late"}})
			Expect(err).To(MatchError(context.DeadlineExceeded))
		}()
		<-sc.sent
		var once sync.Once
		confirming, err := janitor.New(scoped.New(blindCache{cp.Client}, "dev"), w, janitor.WithConfirmedGone(gone),
			janitor.WithLiveReader(afterList{Reader: cp.Client, then: func() { once.Do(func() { close(sc.release); <-sc.landed }) }}))
		Expect(err).NotTo(HaveOccurred())
		withdraw(ctx, confirming, live)
		<-writerDone
		Expect(exists(ctx, w.Namespace, "late")).To(BeTrue(), "written after the read")

		withdraw(ctx, pass(w, blindCache{cp.Client}, gone, lists), live)
		Expect(exists(ctx, w.Namespace, "late")).To(BeFalse(), "a later Withdraw trusted a confirmation the write overtook")
	})

	It("forgets an owner", func(ctx context.Context) {
		w := owner(ctx, cp.Namespace(ctx), "w")
		gone, lists := janitor.NewConfirmedGone(), &atomic.Int32{}
		withdraw(ctx, pass(w, cp.Client, gone, lists), live)
		Expect(gone.Len()).To(Equal(1))
		gone.Forget(client.ObjectKeyFromObject(w))
		Expect(gone.Len()).To(Equal(0))
	})
})
