package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/object"
	"github.com/trustplane/trustplane/common/status"
)

// remoteChildHandler keeps one ConfigMap per widget in another namespace,
// where no owner reference is allowed: the owner labels alone make it a
// child. Its ConfigMaps are an ordinary (not Live) owned type.
type remoteChildHandler struct{ remote string }

func (h *remoteChildHandler) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error {
	j := janitor.FromContext(ctx)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace + "-" + w.Name, Namespace: h.remote}}
	if _, err := j.CreateOrUpdate(ctx, cm, func() error { cm.Data = map[string]string{"k": "v"}; return nil }); err != nil {
		return err
	}
	return j.Declare(&corev1.ConfigMapList{})
}

func (h *remoteChildHandler) Delete(context.Context, *widgetv1.Widget) error { return nil }

func (h *remoteChildHandler) OwnedTypes() []janitor.ChildType {
	return []janitor.ChildType{{List: &corev1.ConfigMapList{}}}
}

// scriptedHandler returns what its function says, or panics.
type scriptedHandler struct {
	create func(w *widgetv1.Widget) error
}

func (h *scriptedHandler) CreateOrUpdate(_ context.Context, w *widgetv1.Widget) error {
	return h.create(w)
}
func (h *scriptedHandler) Delete(context.Context, *widgetv1.Widget) error { return nil }

// reconcileRecovering runs one pass and reports a panic that escaped it.
func reconcileRecovering(ctx context.Context, c *controller.Controller[*widgetv1.Widget], obj client.Object) (res ctrl.Result, err error, panicked any) {
	defer func() { panicked = recover() }()
	res, err = reconcileOnce(ctx, c, obj)
	return res, err, nil
}

var _ = Describe("Environment label edited on an owner", func() {
	var ns, remote string
	BeforeEach(func(ctx context.Context) {
		ns, remote = newNamespace(ctx), newNamespace(ctx)
	})

	It("deletes the children written under the earlier environment when the owner goes", func(ctx context.Context) {
		h := &remoteChildHandler{remote: remote}
		c := controller.New("widget-env-edit", cp.Client, h, controller.Options{Config: config.Default()})
		w := newWidget(ns, "moved", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ns + "-moved", Namespace: remote}}
		get(ctx, child)
		Expect(child.Labels).To(HaveKeyWithValue(labels.Environment, env))

		By("a tenant moving the owner to another environment, then deleting it")
		get(ctx, w)
		w.Labels[labels.Environment] = "elsewhere"
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		Expect(cp.Client.Delete(ctx, w)).To(Succeed())
		Eventually(func(g Gomega) {
			_, err := reconcileOnce(ctx, c, w)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(apierrors.IsNotFound(cp.Client.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{}))).To(BeTrue())
		}).WithTimeout(10 * time.Second).Should(Succeed())

		err = cp.Client.Get(ctx, client.ObjectKeyFromObject(child), &corev1.ConfigMap{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the owner is gone but its child of the earlier environment was left behind")
	})
})

var _ = Describe("An owner moved to another environment", func() {
	It("moves its children into the new environment and stays Ready", func(ctx context.Context) {
		ns := newNamespace(ctx)
		c := controller.New("widget-env-move", cp.Client, &widget.Handler{}, controller.Options{Config: config.Default()})
		w := newWidget(ns, "moving", true, "moving-a")
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())

		get(ctx, w)
		w.Labels[labels.Environment] = "prod"
		Expect(cp.Client.Update(ctx, w)).To(Succeed())
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred(), "the pass after the move failed on the child of the earlier environment")
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "moving-a", Namespace: ns}}
		get(ctx, child)
		Expect(child.Labels).To(HaveKeyWithValue(labels.Environment, "prod"))
	})
})

var _ = Describe("Handler failures that must surface", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("turns a handler panic into an error and keeps the object's state", func(ctx context.Context) {
		panics := true
		h := &scriptedHandler{create: func(*widgetv1.Widget) error {
			if panics {
				panic("nil map in handler")
			}
			return nil
		}}
		c := controller.New("widget-panic", cp.Client, h, controller.Options{Config: config.Default()})
		w := newWidget(ns, "panicky", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err, p := reconcileRecovering(ctx, c, w)
		Expect(p).To(BeNil(), "the handler's panic escaped the pass: %v", p)
		Expect(err).To(HaveOccurred())

		panics = false
		_, err, p = reconcileRecovering(ctx, c, w)
		Expect(p).To(BeNil())
		Expect(err).NotTo(HaveOccurred())
		Expect(condition.IsReady(get(ctx, w).(*widgetv1.Widget))).To(BeTrue())
	})

	DescribeTable("surfaces a Blocked error whose reason is no valid condition reason, with what to fix",
		func(ctx context.Context, reason string) {
			h := &scriptedHandler{create: func(*widgetv1.Widget) error {
				return ctrlerrors.WithReason(reason, ctrlerrors.BlockedErrorf("create the Secret tls-ca first"))
			}}
			c := controller.New("widget-reason", cp.Client, h, controller.Options{Config: config.Default()})
			w := newWidget(ns, fmt.Sprintf("r%d", len(reason)), true)
			Expect(cp.Client.Create(ctx, w)).To(Succeed())
			_, _ = reconcileOnce(ctx, c, w)
			get(ctx, w)
			p := cond(w, condition.TypeProcessing)
			Expect(p).NotTo(BeNil(), "no condition was written")
			Expect(p.Reason).To(Equal(condition.ReasonBlocked))
			Expect(p.Message).To(ContainSubstring("create the Secret tls-ca first"))
			Expect(cond(w, condition.TypeReady).Status).To(Equal(metav1.ConditionFalse))
		},
		Entry("with spaces", "Dependency missing"),
		Entry("empty", ""),
		Entry("too long", "Missing"+strings.Repeat("x", 1100)),
	)

	It("retries a Retryable error with a long delay after its delay, not never", func(ctx context.Context) {
		const d = 2000000 * time.Hour
		h := &scriptedHandler{create: func(*widgetv1.Widget) error {
			return ctrlerrors.RetryableWithDelayErrorf(d, "come back much later")
		}}
		cfg := config.Default()
		cfg.JitterFactor = 1
		c := controller.New("widget-long-delay", cp.Client, h, controller.Options{Config: cfg, Random: func() float64 { return 0.999 }})
		w := newWidget(ns, "patient", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		res, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">=", d), "a negative RequeueAfter means no retry at all")
	})
})

var _ = Describe("A handler panic in a manager", func() {
	It("is retried as an error and the object becomes Ready once the handler stops panicking", func(ctx context.Context) {
		mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		Expect(err).NotTo(HaveOccurred())
		var calls atomic.Int64
		h := &scriptedHandler{create: func(*widgetv1.Widget) error {
			if calls.Add(1) <= 2 {
				panic("nil map in handler")
			}
			return nil
		}}
		cfg := config.Default()
		cfg.RequeueAfterOnError = 100 * time.Millisecond
		c := controller.New("widget-panic-managed", mgr.GetClient(), h, controller.Options{Config: cfg})
		Expect(controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} }, nil)).To(Succeed())
		mctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		DeferCleanup(func() { cancel(); <-done })

		w := newWidget(newNamespace(ctx), "panicky", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		Eventually(func() bool {
			return condition.IsReady(get(ctx, &widgetv1.Widget{ObjectMeta: w.ObjectMeta}).(*widgetv1.Widget))
		}).WithTimeout(20 * time.Second).Should(BeTrue())
		Expect(calls.Load()).To(BeNumerically(">=", 3))
		Consistently(done).ShouldNot(Receive(), "the manager stopped")
	})
})

// valueStatusWidget declares CommonStatus on a value receiver: it compiles
// and satisfies object.Object, but each call returns a copy.
type valueStatusWidget struct{ widgetv1.Widget }

func (v valueStatusWidget) CommonStatus() *status.Common { return &v.Status.Common }

// valueStatusHandler handles valueStatusWidgets and does nothing.
type valueStatusHandler struct{}

func (valueStatusHandler) CreateOrUpdate(context.Context, *valueStatusWidget) error { return nil }
func (valueStatusHandler) Delete(context.Context, *valueStatusWidget) error         { return nil }

var _ = Describe("A kind whose CommonStatus returns a copy", func() {
	It("is refused when set up and on every pass, naming the method, instead of losing every condition", func(ctx context.Context) {
		c := controller.New[*valueStatusWidget]("widget-value-status", cp.Client, valueStatusHandler{}, controller.Options{Config: config.Default()})
		mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		Expect(err).NotTo(HaveOccurred())
		err = controller.SetupWithManager(mgr, c, func() *valueStatusWidget { return &valueStatusWidget{} }, nil)
		Expect(err).To(MatchError(ContainSubstring("CommonStatus returns a copy")))
		_, err = c.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "default", Name: "w"}}, &valueStatusWidget{})
		Expect(err).To(MatchError(ContainSubstring("CommonStatus returns a copy")))
		Expect(object.StatusInPlace(&widgetv1.Widget{})).To(Succeed(), "a pointer receiver is refused")
	})
})

var _ = Describe("A condition the API server would refuse", func() {
	It("lands as InvalidConditionType, saying what was given, and the rest of the status with it", func(ctx context.Context) {
		ns := newNamespace(ctx)
		h := &scriptedHandler{create: func(w *widgetv1.Widget) error {
			condition.Set(w, metav1.Condition{Type: "Greeting Sent", Status: "Yes", Reason: "Written", Message: "sent"})
			return nil
		}}
		c := controller.New("widget-bad-type", cp.Client, h, controller.Options{Config: config.Default()})
		w := newWidget(ns, "badtype", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		got := get(ctx, w).(*widgetv1.Widget)
		Expect(condition.IsReady(got)).To(BeTrue(), "the status write was refused")
		bad := cond(got, condition.TypeInvalid)
		Expect(bad).NotTo(BeNil())
		Expect(bad.Status).To(Equal(metav1.ConditionUnknown))
		Expect(bad.Message).To(ContainSubstring(`"Greeting Sent"`))
		Expect(bad.Message).To(ContainSubstring(`"Yes"`))
	})
})

var _ = Describe("A kind that serves no status subresource", func() {
	// The API server answers a status write of such a kind NotFound, as
	// for an object deleted meanwhile. The suite's CRD serves the
	// subresource, so the answer is injected on the status writes alone.
	It("says so on a failed status write, naming what to declare", func(ctx context.Context) {
		ns := newNamespace(ctx)
		direct, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		noStatus := interceptor.NewClient(direct, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				return apierrors.NewNotFound(schema.GroupResource{Group: "test.trustplane.dev", Resource: "widgets"}, obj.GetName())
			},
		})
		h := &scriptedHandler{create: func(*widgetv1.Widget) error { return nil }}
		c := controller.New("widget-no-status", noStatus, h, controller.Options{Config: config.Default()})
		w := newWidget(ns, "nostatus", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		_, err = reconcileOnce(ctx, c, w)
		Expect(err).To(MatchError(ContainSubstring("serves no status subresource")))
	})
})

var _ = Describe("Children in another namespace than their owner's", func() {
	It("are repaired at once when watched with EnqueueOwnerByLabels, which no owner reference can reach", func(ctx context.Context) {
		ns, remote := newNamespace(ctx), newNamespace(ctx)
		mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		Expect(err).NotTo(HaveOccurred())
		cfg := config.Default() // requeue-after 30 minutes: only an event repairs the child in time
		c := controller.New("widget-remote-watch", mgr.GetClient(), &remoteChildHandler{remote: remote}, controller.Options{Config: cfg})
		Expect(controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} },
			func(b *builder.Builder) *builder.Builder {
				return b.Watches(&corev1.ConfigMap{}, controller.EnqueueOwnerByLabels("Widget"))
			})).To(Succeed())
		mctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		DeferCleanup(func() { cancel(); <-done })

		w := newWidget(ns, "far", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		child := client.ObjectKey{Namespace: remote, Name: ns + "-far"}
		first := &corev1.ConfigMap{}
		Eventually(func() error { return cp.Client.Get(ctx, child, first) }).WithTimeout(20 * time.Second).Should(Succeed())
		Expect(cp.Client.Delete(ctx, first)).To(Succeed())
		Eventually(func() (types.UID, error) {
			again := &corev1.ConfigMap{}
			err := cp.Client.Get(ctx, child, again)
			return again.UID, err
		}).WithTimeout(20*time.Second).Should(And(Not(BeEmpty()), Not(Equal(first.UID))), "the child deleted by hand was not written again")
	})
})

// unlistedRemoteHandler writes remoteChildHandler's child in another
// namespace but leaves its type out of OwnedTypes (it lists none).
type unlistedRemoteHandler struct{ remoteChildHandler }

func (h *unlistedRemoteHandler) OwnedTypes() []janitor.ChildType { return nil }

var _ = Describe("Children no owner reference reaches and OwnedTypes leaves out", func() {
	// passLog runs one pass of c on w and returns what it logged.
	passLog := func(ctx context.Context, c *controller.Controller[*widgetv1.Widget], w *widgetv1.Widget) string {
		var lines []string
		log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
		_, err := reconcileOnce(logf.IntoContext(ctx, log), c, w)
		Expect(err).NotTo(HaveOccurred())
		return strings.Join(lines, "\n")
	}

	It("are named in the log once, since they would outlive their owner", func(ctx context.Context) {
		ns, remote := newNamespace(ctx), newNamespace(ctx)
		c := controller.New("widget-unlisted", cp.Client, &unlistedRemoteHandler{remoteChildHandler{remote: remote}}, controller.Options{Config: config.Default()})
		w := newWidget(ns, "unlisted", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		Expect(passLog(ctx, c, w)).To(And(ContainSubstring("children of kind ConfigMap"), ContainSubstring("OwnedTypes")))
		Expect(passLog(ctx, c, w)).NotTo(ContainSubstring("children of kind ConfigMap"), "warned again")
	})

	It("are not named when OwnedTypes lists their type", func(ctx context.Context) {
		ns, remote := newNamespace(ctx), newNamespace(ctx)
		c := controller.New("widget-listed", cp.Client, &remoteChildHandler{remote: remote}, controller.Options{Config: config.Default()})
		w := newWidget(ns, "listed", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		Expect(passLog(ctx, c, w)).NotTo(ContainSubstring("children of kind"))
	})
})
