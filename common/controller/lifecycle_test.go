package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/testenv"
)

const env = "test"

var nsCounter atomic.Int64

// newNamespace creates a namespace of its own for one spec.
func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("ns-%d", nsCounter.Add(1))
	Expect(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

func newWidget(ns, name string, withEnv bool, children ...string) *widgetv1.Widget {
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: widgetv1.WidgetSpec{Children: children, Data: map[string]string{"k": "v"}}}
	if withEnv {
		w.Labels = map[string]string{labels.Environment: env}
	}
	return w
}

// writeCounter counts API writes made through the client it wraps.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) wrap(c client.Client) client.Client {
	return interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.n.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.n.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.n.Add(1)
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.n.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.n.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
}

func watchClient() client.WithWatch {
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func reconcileOnce(ctx context.Context, c *controller.Controller[*widgetv1.Widget], obj client.Object) (ctrl.Result, error) {
	return c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)}, &widgetv1.Widget{})
}

func get(ctx context.Context, obj client.Object) client.Object {
	Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

func cond(w *widgetv1.Widget, t string) *metav1.Condition {
	return meta.FindStatusCondition(w.Status.Conditions, t)
}

var _ = Describe("Controller lifecycle (direct reconciles against a real API server)", func() {
	var (
		ns  string
		h   *faultyHandler
		cfg config.Config
	)
	BeforeEach(func(ctx context.Context) {
		ns = newNamespace(ctx)
		h = &faultyHandler{}
		cfg = config.Default()
	})
	newController := func(c client.Client) *controller.Controller[*widgetv1.Widget] {
		return controller.New("widget-direct", c, h, controller.Options{Config: cfg})
	}

	It("creates children, adds the finalizer and reports Ready for the current generation", func(ctx context.Context) {
		w := newWidget(ns, "happy", true, "a", "b")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		res, err := reconcileOnce(ctx, newController(cp.Client), w)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">=", cfg.RequeueAfter))

		get(ctx, w)
		Expect(w.Finalizers).To(ContainElement(labels.Finalizer))
		Expect(condition.IsReady(w)).To(BeTrue())
		Expect(cond(w, condition.TypeProcessing).Reason).To(Equal(condition.ReasonDone))
		Expect(w.Status.ObservedGeneration).To(Equal(w.Generation))
		Expect(w.Status.ChildCount).To(Equal(2))
		for _, name := range []string{"a", "b"} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
			get(ctx, cm)
			Expect(cm.Labels).To(HaveKeyWithValue(labels.Environment, env))
			Expect(metav1.IsControlledBy(cm, w)).To(BeTrue())
		}
	})

	It("deletes the declared children a successful pass did not write, without the handler calling Cleanup", func(ctx context.Context) {
		w := newWidget(ns, "shrinking", true, "a", "b")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		c := newController(cp.Client)
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		get(ctx, w)
		w.Spec.Children = []string{"a"}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(apierrors.IsNotFound(cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b"}, &corev1.ConfigMap{}))).To(BeTrue())
		Expect(cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, &corev1.ConfigMap{})).To(Succeed())
	})

	It("deletes nothing after a failed pass, though the handler declared the type", func(ctx context.Context) {
		w := newWidget(ns, "failing", true, "a", "b")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		c := newController(cp.Client)
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		get(ctx, w)
		w.Spec.Children = []string{"a"}
		w.Spec.Fail = "late"
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).To(MatchError(ContainSubstring("failed after writing")))
		Expect(cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b"}, &corev1.ConfigMap{})).To(Succeed())
	})

	Describe("failure mode 1: stuck deletion", func() {
		It("deletes an object whose environment label was removed, calling Delete first", func(ctx context.Context) {
			w := newWidget(ns, "unlabelled", true, "child")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			c := newController(cp.Client)
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())

			get(ctx, w)
			delete(w.Labels, labels.Environment)
			Expect(cp.Client.Update(ctx, w)).To(Succeed())
			Expect(cp.Client.Delete(ctx, w)).To(Succeed())
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())

			err = cp.Client.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the widget must be gone")
			err = cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "child"}, &corev1.ConfigMap{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Delete must have removed the child")
		})

		It("keeps the finalizer until Delete succeeds", func(ctx context.Context) {
			w := newWidget(ns, "stubborn", true, "child")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			c := newController(cp.Client)
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())

			failing := true
			h.deleteErr = func() error {
				if failing {
					return errors.New("backend unreachable")
				}
				return nil
			}
			Expect(cp.Client.Delete(ctx, w)).To(Succeed())
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(MatchError(ContainSubstring("backend unreachable")))
			get(ctx, w)
			Expect(w.Finalizers).To(ContainElement(labels.Finalizer))
			Expect(cond(w, condition.TypeReady).Status).To(Equal(metav1.ConditionFalse))
			Expect(cond(w, condition.TypeReady).Message).To(ContainSubstring("backend unreachable"))

			failing = false
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(apierrors.IsNotFound(cp.Client.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{}))).To(BeTrue())
		})
	})

	It("tells a handler that remembers objects to forget one that is gone, though Delete never ran", func(ctx context.Context) {
		w := newWidget(ns, "forgotten", true, "child")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		f := &forgettingHandler{faultyHandler: h}
		c := controller.New("widget-forget", cp.Client, f, controller.Options{Config: cfg})
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.forgot).To(BeEmpty(), "forgot an object that is there")

		By("removing the finalizer by hand and deleting the widget")
		get(ctx, w)
		w.Finalizers = nil
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		Expect(cp.Client.Delete(ctx, w)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cp.Client.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{}))
		}).Should(BeTrue())
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.deletes).To(BeZero(), "Delete ran")
		Expect(f.forgot).To(ConsistOf(client.ObjectKeyFromObject(w)))
	})

	Describe("failure mode 2: missing environment label", func() {
		It("blocks with a message naming the label and does not call the handler", func(ctx context.Context) {
			w := newWidget(ns, "nolabel", false, "child")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			res, err := reconcileOnce(ctx, newController(cp.Client), w)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.RequeueAfter).To(BeZero(), "the label event reconciles; no timer needed")
			Expect(h.createCalls).To(BeZero())
			get(ctx, w)
			ready, processing := cond(w, condition.TypeReady), cond(w, condition.TypeProcessing)
			Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			Expect(ready.Reason).To(Equal(condition.ReasonMissingEnvironment))
			Expect(processing.Reason).To(Equal(condition.ReasonBlocked))
			Expect(processing.Message).To(ContainSubstring(labels.Environment))
		})

		It("uses the configured default environment", func(ctx context.Context) {
			cfg.DefaultEnvironment = env
			w := newWidget(ns, "defaulted", false, "child")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			_, err := reconcileOnce(ctx, newController(cp.Client), w)
			Expect(err).NotTo(HaveOccurred())
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		})
	})

	Describe("failure mode 3: write loops", func() {
		It("makes zero API writes across repeated reconciles of a steady object", func(ctx context.Context) {
			w := newWidget(ns, "steady", true, "a", "b")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			counter := &writeCounter{}
			c := newController(counter.wrap(watchClient()))
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			rv := get(ctx, w).GetResourceVersion()
			childRV := get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}}).GetResourceVersion()

			counter.n.Store(0)
			Consistently(func(g Gomega) {
				_, err := reconcileOnce(ctx, c, w)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).GetResourceVersion()).To(Equal(rv))
				g.Expect(get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}}).GetResourceVersion()).To(Equal(childRV))
			}, "2s", "100ms").Should(Succeed())
			Expect(counter.n.Load()).To(BeZero())
		})
	})

	Describe("failure mode 4: status conflicts", func() {
		It("reconciles again after a conflicting status write, and then writes it", func(ctx context.Context) {
			w := newWidget(ns, "conflict", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var attempts atomic.Int64
			c := newController(interceptor.NewClient(watchClient(), interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					if attempts.Add(1) == 1 {
						return apierrors.NewConflict(schema.GroupResource{Resource: "widgets"}, obj.GetName(), errors.New("injected"))
					}
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			}))
			res, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred(), "a conflict is not an error to log")
			Expect(res.RequeueAfter).To(Equal(cfg.RequeueAfterOnError), "the pass is retried soon")
			Expect(condition.Find(get(ctx, w).(*widgetv1.Widget), condition.TypeReady)).To(BeNil(), "nothing was written")

			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(attempts.Load()).To(Equal(int64(2)))
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		})

		It("works from the object its own last status write left while the cache still shows the version before it", func(ctx context.Context) {
			w := newWidget(ns, "stale-status", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var (
				cache     laggingCache
				handlerRV string
			)
			c := controller.New("widget-stale-status", cache.client(), handlerFunc(func(_ context.Context, w *widgetv1.Widget) error {
				handlerRV = w.ResourceVersion
				return nil
			}), controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(cache.patches.Load()).To(Equal(int64(1)))
			current := get(ctx, &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.Name}}).GetResourceVersion()
			Expect(cache.before.ResourceVersion).NotTo(Equal(current), "the cache lags behind the write")

			for range 2 {
				res, err := reconcileOnce(ctx, c, w)
				Expect(err).NotTo(HaveOccurred())
				Expect(handlerRV).To(Equal(current), "the handler works from the object the write left, not from the copy before it")
				Expect(cache.patches.Load()).To(Equal(int64(1)), "the status is current: nothing to write")
				Expect(res.RequeueAfter).To(BeNumerically(">=", cfg.RequeueAfter), "no early retry: the pass was a whole one")
			}

			By("once the cache shows a newer version, the pass works from that")
			cache.before = nil
			Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(w), w)).To(Succeed())
			w.Labels["touched"] = "yes"
			Expect(cp.Client.Update(ctx, w)).To(Succeed())
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(handlerRV).To(Equal(w.ResourceVersion))
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		})

		It("corrects a status written by a pass that itself worked from the object its last write left, while the cache still lags", func(ctx context.Context) {
			w := newWidget(ns, "stale-chain", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var (
				msg   string
				stale *widgetv1.Widget
			)
			c := controller.New("widget-stale-chain", interceptor.NewClient(watchClient(), interceptor.Funcs{
				Get: showing(func() *widgetv1.Widget { return stale }),
			}), failingWith(&msg), controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			ready := get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget)
			Expect(condition.IsReady(ready)).To(BeTrue())

			msg = "first failure"
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(HaveOccurred())

			By("the cache still shows the Ready=True copy; the pass works from the object its last write left and writes again")
			stale = ready
			msg = "second failure"
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(HaveOccurred())
			Expect(cond(get(ctx, w).(*widgetv1.Widget), condition.TypeReady).Message).To(ContainSubstring("second failure"))

			By("the cache still shows the Ready=True copy; the pass succeeds")
			msg = ""
			res, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue(), "the status written since is corrected")
			Expect(res.RequeueAfter).To(BeNumerically(">=", cfg.RequeueAfter), "at once, with no early retry")
		})

		It("writes a failure whose message is longer than a condition may hold, cut to the limit at a character boundary", func(ctx context.Context) {
			w := newWidget(ns, "long-message", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var msg string
			c := controller.New("widget-long-message", watchClient(), failingWith(&msg), controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())

			// 40,001 characters (the API server's limit counts characters)
			// in 60,001 bytes; the cut falls among two-byte characters, so
			// a cut by bytes alone would split one.
			msg = "x" + strings.Repeat("é", 20000) + strings.Repeat("a", 20000)
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).NotTo(ContainSubstring("write status"), "the status write is accepted")
			ready := cond(get(ctx, w).(*widgetv1.Widget), condition.TypeReady)
			Expect(ready.Status).To(Equal(metav1.ConditionFalse), "the failure is shown, not the Ready=True before it")
			Expect(len(ready.Message)).To(BeNumerically("<=", condition.MaxMessageLength))
			Expect(utf8.ValidString(ready.Message)).To(BeTrue())
			Expect(ready.Message).To(HavePrefix("x" + strings.Repeat("é", 1000)))
			Expect(ready.Message).To(MatchRegexp(`\(\d+ bytes cut\)$`))
		})

		It("works from the object its last write left when the cache shows the object as created, before the finalizer patch", func(ctx context.Context) {
			w := newWidget(ns, "stale-first", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			created := w.DeepCopy() // V1: no finalizer
			var (
				afterFinalizer *widgetv1.Widget // V2
				queue          []*widgetv1.Widget
				patches        atomic.Int64
				handlerRV      string
			)
			c := controller.New("widget-stale-first", interceptor.NewClient(watchClient(), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if w, ok := obj.(*widgetv1.Widget); ok && len(queue) > 0 {
						queue[0].DeepCopyInto(w)
						queue = queue[1:]
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				},
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					if patches.Add(1) == 1 {
						afterFinalizer = &widgetv1.Widget{}
						Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), afterFinalizer)).To(Succeed())
					}
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			}), handlerFunc(func(_ context.Context, w *widgetv1.Widget) error {
				handlerRV = w.ResourceVersion
				return nil
			}), controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			current := get(ctx, &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.Name}}).GetResourceVersion()

			By("a child's event starts a pass while the cache shows the created copy, then the finalizer patch's")
			queue = []*widgetv1.Widget{created, afterFinalizer}
			res, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(handlerRV).To(Equal(current), "the handler works from the object the write left")
			Expect(res.RequeueAfter).To(BeNumerically(">=", cfg.RequeueAfter), "no early retry")
		})

		It("carries no unsaved edit of a failed pass into the object the next pass works from", func(ctx context.Context) {
			w := newWidget(ns, "stale-local", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var (
				cache laggingCache
				first = true
				seen  string
				seenD string
			)
			c := controller.New("widget-stale-local", cache.client(), handlerFunc(func(_ context.Context, w *widgetv1.Widget) error {
				if first {
					first = false
					w.Labels["local-only"] = "x"
					w.Spec.Data["local-only"] = "y"
					return ctrlerrors.RetryableErrorf("fail once")
				}
				seen = w.Labels["local-only"]
				seenD = w.Spec.Data["local-only"]
				return nil
			}), controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).To(HaveOccurred())
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(seen).To(BeEmpty(), "a label the server never held")
			Expect(seenD).To(BeEmpty(), "a spec entry the server never held")
		})

		It("keeps the object its last write left unchanged when a pass working from it fails to write its status", func(ctx context.Context) {
			w := newWidget(ns, "stale-alias", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var (
				msg   = "first failure"
				cache laggingCache
			)
			c := controller.New("widget-stale-alias", cache.client(), handlerFunc(func(context.Context, *widgetv1.Widget) error {
				return ctrlerrors.RetryableErrorf("%s", msg)
			}), controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).To(HaveOccurred())

			msg = "second failure"
			cache.failNext.Store(true)
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(MatchError(ContainSubstring("status storage down")))

			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(MatchError(ContainSubstring("second failure")))
			Expect(cond(get(ctx, w).(*widgetv1.Widget), condition.TypeReady).Message).To(ContainSubstring("second failure"))
		})

		It("corrects a status written since when the cache shows the copy before it and the pass would not change that copy's status", func(ctx context.Context) {
			w := newWidget(ns, "stale-equal", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			h := &toggleHandler{}
			var stale *widgetv1.Widget // what a cache that lags shows
			c := controller.New("widget-stale-equal", interceptor.NewClient(watchClient(), interceptor.Funcs{
				Get: showing(func() *widgetv1.Widget { return stale }),
			}), h, controller.Options{Config: cfg})
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			ready := get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget)
			Expect(condition.IsReady(ready)).To(BeTrue())

			By("a transient failure writes Ready=False")
			h.fail.Store(true)
			_, err = reconcileOnce(ctx, c, w)
			Expect(err).To(HaveOccurred())
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeFalse())

			By("the next pass succeeds on a read of the copy from before that write")
			// Its status equals that copy's; the update event of the
			// Ready=False write is the framework's own, which the builder
			// drops, so no later event would correct the status.
			h.fail.Store(false)
			stale = ready
			res, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue(), "the status written since is corrected at once")
			Expect(res.RequeueAfter).To(BeNumerically(">=", cfg.RequeueAfter))
		})

		It("takes a status write the server found nothing to change in for no write, and sends the next", func(ctx context.Context) {
			w := newWidget(ns, "noop-status", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var patches atomic.Int64
			c := newController(interceptor.NewClient(watchClient(), interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					if patches.Add(1) == 1 {
						return nil // as for a field the schema prunes: accepted, nothing changed
					}
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			}))
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			res, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			Expect(patches.Load()).To(Equal(int64(2)), "the version read is current, so the status is sent")
			Expect(res.RequeueAfter).To(BeNumerically(">=", cfg.RequeueAfter))
			Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		})

		It("never loses the handler's error when the status write fails too", func(ctx context.Context) {
			w := newWidget(ns, "doublefault", true, "a")
			w.Spec.Fail = "terminal"
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			c := newController(interceptor.NewClient(watchClient(), interceptor.Funcs{
				SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
					return apierrors.NewServiceUnavailable("status storage down")
				},
			}))
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).To(MatchError(ContainSubstring("something is broken for good")))
			Expect(err).To(MatchError(ContainSubstring("status storage down")))
		})
	})

	Describe("failure mode 5: no clobbering of concurrent edits", func() {
		It("keeps a finalizer and labels added by someone else between read and write", func(ctx context.Context) {
			w := newWidget(ns, "concurrent", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			var injected atomic.Bool
			concurrentEdit := func(ctx context.Context, key client.ObjectKey) {
				if injected.Swap(true) {
					return
				}
				other := &widgetv1.Widget{}
				Expect(cp.Client.Get(ctx, key, other)).To(Succeed())
				other.Finalizers = append(other.Finalizers, "example.com/other")
				other.Labels["edited-by"] = "someone-else"
				Expect(cp.Client.Update(ctx, other)).To(Succeed())
			}
			c := newController(interceptor.NewClient(watchClient(), interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					concurrentEdit(ctx, client.ObjectKeyFromObject(obj))
					return c.Patch(ctx, obj, p, opts...)
				},
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			}))
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			get(ctx, w)
			Expect(w.Finalizers).To(ConsistOf(labels.Finalizer, "example.com/other"))
			Expect(w.Labels).To(HaveKeyWithValue("edited-by", "someone-else"))
			Expect(condition.IsReady(w)).To(BeTrue())
		})

		It("never writes a status computed from an object that changed meanwhile", func(ctx context.Context) {
			w := newWidget(ns, "newer-spec", true, "a")
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			c := newController(interceptor.NewClient(watchClient(), interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					other := &widgetv1.Widget{}
					Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), other)).To(Succeed())
					if len(other.Spec.Children) == 1 {
						other.Spec.Children = append(other.Spec.Children, "b")
						Expect(cp.Client.Update(ctx, other)).To(Succeed())
					}
					return c.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			}))
			_, err := reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			get(ctx, w)
			Expect(w.Spec.Children).To(Equal([]string{"a", "b"}), "the concurrent spec edit survives")
			Expect(w.Status.ChildCount).To(BeZero(), "the status of the outdated generation was not written")

			_, err = reconcileOnce(ctx, c, w)
			Expect(err).NotTo(HaveOccurred())
			get(ctx, w)
			Expect(w.Status.ChildCount).To(Equal(2))
			Expect(w.Status.ObservedGeneration).To(Equal(w.Generation))
			Expect(condition.IsReady(w)).To(BeTrue())
		})
	})

	It("blocks the example widget without children, naming the field to fill", func(ctx context.Context) {
		w := newWidget(ns, "empty", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, newController(cp.Client), w)
		Expect(err).NotTo(HaveOccurred())
		get(ctx, w)
		Expect(cond(w, condition.TypeProcessing).Reason).To(Equal(condition.ReasonBlocked))
		Expect(cond(w, condition.TypeReady).Message).To(ContainSubstring("spec.children"))
	})

	It("does not repeat a transition event when a stale cached copy is read again", func(ctx context.Context) {
		w := newWidget(ns, "stale-cache", true, "a")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		var stale *widgetv1.Widget
		staleClient := interceptor.NewClient(watchClient(), interceptor.Funcs{
			Get: showing(func() *widgetv1.Widget { return stale }),
		})
		recorder := events.NewFakeRecorder(10)
		c := controller.New("widget-events", staleClient, h, controller.Options{Config: cfg, Recorder: recorder})
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(recorder.Events).To(Receive(ContainSubstring("Ready")))

		// A cache that has not seen the status write yet still shows the object as not ready.
		stale = get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget).DeepCopy()
		stale.Status = widgetv1.WidgetStatus{}
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Consistently(recorder.Events, "500ms").ShouldNot(Receive(), "the transition was announced already")
	})

	Describe("error mapping", func() {
		DescribeTable("maps handler errors to conditions and requeues",
			func(ctx context.Context, fail, reason, processing string, wantErr bool, minRequeue time.Duration) {
				w := newWidget(ns, "err-"+fail, true, "a")
				w.Spec.Fail = fail
				Expect(cp.Client.Create(ctx, w)).To(Succeed())
				res, err := reconcileOnce(ctx, newController(cp.Client), w)
				if wantErr {
					Expect(err).To(HaveOccurred())
				} else {
					Expect(err).NotTo(HaveOccurred())
				}
				Expect(res.RequeueAfter).To(BeNumerically(">=", minRequeue))
				get(ctx, w)
				Expect(cond(w, condition.TypeReady).Status).To(Equal(metav1.ConditionFalse))
				Expect(cond(w, condition.TypeReady).Reason).To(Equal(reason))
				Expect(cond(w, condition.TypeProcessing).Reason).To(Equal(processing))
			},
			Entry("blocked: normal requeue, specific reason", "blocked", "DependencyMissing", condition.ReasonBlocked, false, 30*time.Minute),
			Entry("retryable: rate-limited retry", "retryable", "Retrying", condition.ReasonProcessing, true, time.Duration(0)),
			Entry("retryable with delay: retry after the delay", "delay", "Retrying", condition.ReasonProcessing, false, time.Minute),
			Entry("terminal: rate-limited, error message in Ready", "terminal", condition.ReasonError, condition.ReasonProcessing, true, time.Duration(0)),
		)
	})
})

var _ = Describe("Controller in a manager", Ordered, func() {
	var (
		h        *countingHandler
		cancel   context.CancelFunc
		registry *prometheus.Registry
	)
	BeforeAll(func() {
		mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		Expect(err).NotTo(HaveOccurred())
		registry = prometheus.NewRegistry()
		metrics, err := controller.NewMetrics(registry)
		Expect(err).NotTo(HaveOccurred())
		h = &countingHandler{}
		cfg := config.Default()
		cfg.MaxBackoff = 10 * time.Second
		c := controller.New("widget-managed", mgr.GetClient(), h, controller.Options{
			Config: cfg, Metrics: metrics, Recorder: mgr.GetEventRecorder("widget-managed"),
		})
		Expect(controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} }, nil)).To(Succeed())
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		go func() {
			defer GinkgoRecover()
			Expect(mgr.Start(ctx)).To(Succeed())
		}()
		DeferCleanup(func() { cancel() })
	})

	It("failure mode 2: reconciles as soon as the missing label is added", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "late-label", false, "a")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		Eventually(func(g Gomega) {
			got := get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget)
			g.Expect(cond(got, condition.TypeProcessing)).NotTo(BeNil())
			g.Expect(cond(got, condition.TypeProcessing).Reason).To(Equal(condition.ReasonBlocked))
		}).Should(Succeed())
		get(ctx, w)
		w.Labels = map[string]string{labels.Environment: env}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		Eventually(func() bool {
			return condition.IsReady(get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget))
		}, "10s").Should(BeTrue())
	})

	It("runs one pass per change: its own finalizer and status writes start no other", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "one-pass", true, "a")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)
		Eventually(func() bool {
			return condition.IsReady(get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget))
		}, "10s").Should(BeTrue())
		// The pass added the finalizer and wrote the status: two update
		// events of the widget, neither a change of spec or metadata.
		Consistently(func() int64 { return h.calls(key) }, "2s", "100ms").Should(Equal(int64(1)))

		get(ctx, w)
		w.Spec.Data = map[string]string{"k": "changed"}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		Eventually(func() int64 { return h.calls(key) }, "10s").Should(Equal(int64(2)))
		Eventually(func() int64 {
			return get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget).Status.ObservedGeneration
		}, "10s").Should(Equal(w.Generation))
		Consistently(func() int64 { return h.calls(key) }, "2s", "100ms").Should(Equal(int64(2)))
	})

	It("failure mode 8: backs off a terminal error instead of hot-looping", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "terminal", true, "a")
		w.Spec.Fail = "terminal"
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)
		Eventually(func(g Gomega) {
			got := get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget)
			g.Expect(cond(got, condition.TypeReady)).NotTo(BeNil())
			g.Expect(cond(got, condition.TypeReady).Message).To(ContainSubstring("broken for good"))
		}).Should(Succeed())
		start := h.calls(key)
		// With a 1s base delay doubling per failure, 4s hold at most 1+2 retries (3 with timing slack).
		Consistently(func() int64 { return h.calls(key) - start }, "4s", "200ms").Should(BeNumerically("<=", 3))
	})

	It("counts blocked passes and objects by Ready, and leaves reconcile counts and durations to controller-runtime", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "metered", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed()) // no children: Blocked
		value := func(g Gomega, name string, labels map[string]string) float64 {
			n, err := testenv.MetricSum(registry, name, labels)
			g.Expect(err).NotTo(HaveOccurred())
			return n
		}
		Eventually(func(g Gomega) {
			g.Expect(value(g, "trustplane_reconcile_blocked_total", map[string]string{"controller": "widget-managed"})).To(BeNumerically(">", 0))
			g.Expect(value(g, "trustplane_objects", map[string]string{"controller": "widget-managed", "ready": "False"})).To(BeNumerically(">", 0))
		}, "10s").Should(Succeed())

		families, err := registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		names := map[string]bool{}
		for _, f := range families {
			names[f.GetName()] = true
		}
		Expect(names).To(Equal(map[string]bool{"trustplane_reconcile_blocked_total": true, "trustplane_objects": true,
			"trustplane_status_writes_behind_total": true}))
		// This handler never lets its status wait: no write off the worker,
		// yet the series are there, at zero.
		series, err := testenv.MetricSum(registry, "trustplane_status_writes_behind_total", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(series).To(BeZero())
	})

	It("emits events on transitions only", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "evented", true, "a")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		readyEvents := func() int {
			list := &eventsList{}
			Expect(list.load(ctx, ns)).To(Succeed())
			return list.count("Ready")
		}
		Eventually(readyEvents, "10s").Should(Equal(1))
		// Touch the object: more passes, no more Ready events.
		get(ctx, w)
		w.Annotations = map[string]string{"touched": "yes"}
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		Consistently(readyEvents, "2s", "200ms").Should(Equal(1))
	})
})

// countingHandler counts CreateOrUpdate calls per object (safe for
// concurrent workers).
type countingHandler struct {
	faultyHandler
	counts syncMap
}

func (h *countingHandler) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error {
	h.counts.inc(client.ObjectKeyFromObject(w))
	return h.faultyHandler.CreateOrUpdate(ctx, w)
}

func (h *countingHandler) calls(key client.ObjectKey) int64 { return h.counts.get(key) }

// toggleHandler fails with a retryable error while fail is set, and
// otherwise succeeds without writing anything.
type toggleHandler struct{ fail atomic.Bool }

func (h *toggleHandler) CreateOrUpdate(context.Context, *widgetv1.Widget) error {
	if h.fail.Load() {
		return ctrlerrors.RetryableErrorf("transient failure")
	}
	return nil
}

func (h *toggleHandler) Delete(context.Context, *widgetv1.Widget) error { return nil }

// handlerFunc is a Handler whose CreateOrUpdate is the function itself and
// whose Delete does nothing.
type handlerFunc func(context.Context, *widgetv1.Widget) error

// failingWith returns a handler that fails (retryable) with *msg while it
// is not empty, and succeeds otherwise.
func failingWith(msg *string) handlerFunc {
	return func(context.Context, *widgetv1.Widget) error {
		if *msg != "" {
			return ctrlerrors.RetryableErrorf("%s", *msg)
		}
		return nil
	}
}

func (f handlerFunc) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error { return f(ctx, w) }

func (handlerFunc) Delete(context.Context, *widgetv1.Widget) error { return nil }

// laggingCache stands for a cache that has not shown the controller's first
// status write: once that write is made, its client's reads of Widgets
// return the object as the server held it just before (until before is
// set to nil). It counts status patches, and fails the next one with 503
// when failNext is set.
type laggingCache struct {
	before   *widgetv1.Widget
	patches  atomic.Int64
	failNext atomic.Bool
}

func (l *laggingCache) client() client.Client {
	return interceptor.NewClient(watchClient(), interceptor.Funcs{
		Get: showing(func() *widgetv1.Widget { return l.before }),
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if l.patches.Add(1) == 1 {
				l.before = &widgetv1.Widget{}
				Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), l.before)).To(Succeed())
			}
			if l.failNext.Swap(false) {
				return apierrors.NewServiceUnavailable("status storage down")
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
}

// showing returns an interceptor Get whose reads of Widgets return a copy
// of what shown returns while that is not nil, as a cache that shows that
// copy would.
func showing(shown func() *widgetv1.Widget) func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
	return func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if w, ok := obj.(*widgetv1.Widget); ok {
			if shownNow := shown(); shownNow != nil {
				shownNow.DeepCopyInto(w)
				return nil
			}
		}
		return c.Get(ctx, key, obj, opts...)
	}
}
