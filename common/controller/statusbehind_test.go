package controller_test

import (
	"context"
	"errors"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/testenv"
)

// behindMetrics are a Controller's metrics on a registry of their own, to
// read its writes off the worker by result.
type behindMetrics struct {
	reg     *prometheus.Registry
	metrics *controller.Metrics
}

// newBehindMetrics makes the metrics in a container's body; a
// BeforeAll checks that they registered.
func newBehindMetrics() behindMetrics {
	reg := prometheus.NewRegistry()
	m, err := controller.NewMetrics(reg)
	BeforeAll(func() { Expect(err).NotTo(HaveOccurred()) })
	return behindMetrics{reg: reg, metrics: m}
}

// writes returns how many status writes off the worker of the Controller
// named name ended with result.
func (b behindMetrics) writes(g Gomega, name, result string) float64 {
	n, err := testenv.MetricSum(b.reg, "trustplane_status_writes_behind_total", map[string]string{"controller": name, "result": result})
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

// statusGate holds back the status write of one widget's status with one
// childCount, until released or for 10 s: a slow API server, on demand.
// With fail set, it refuses that write instead, as the API server refuses
// a write that conflicts.
type statusGate struct {
	widget  string
	count   int
	fail    bool
	mu      sync.Mutex
	blocked bool
	// ended is when the API server answered the write the gate held.
	ended time.Time
	// arrived is closed when a write first comes to the gate.
	arrived  chan struct{}
	arrive   sync.Once
	released chan struct{}
	once     sync.Once
}

func newStatusGate(widget string, count int) *statusGate {
	return &statusGate{widget: widget, count: count, arrived: make(chan struct{}), released: make(chan struct{})}
}

// wrap returns c with its status writes passing the gate.
func (g *statusGate) wrap(c client.Client) client.Client { return gatedClient{Client: c, gate: g} }

// pass blocks a write of obj's status while the gate is closed (until
// ctx ends, whose error it then returns), or refuses it, when obj is the
// gate's widget with the gate's childCount.
func (g *statusGate) pass(ctx context.Context, obj client.Object) error {
	if !g.holds(obj) {
		return nil
	}
	w := obj.(*widgetv1.Widget)
	if g.fail {
		return apierrors.NewConflict(widgetv1.GroupVersion.WithResource("widgets").GroupResource(), w.Name,
			errors.New("the gate refuses this write"))
	}
	g.mu.Lock()
	g.blocked = true
	g.mu.Unlock()
	g.arrive.Do(func() { close(g.arrived) })
	defer func() {
		g.mu.Lock()
		g.blocked = false
		g.mu.Unlock()
	}()
	select {
	case <-g.released:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
	}
	return nil
}

// holds reports whether obj is the gate's widget with the gate's
// childCount.
func (g *statusGate) holds(obj client.Object) bool {
	w, ok := obj.(*widgetv1.Widget)
	return ok && w.Name == g.widget && w.Status.ChildCount == g.count
}

// blockingWithin reports whether a write waits at the gate now or comes
// to it within d and waits.
func (g *statusGate) blockingWithin(d time.Duration) bool {
	select {
	case <-g.arrived:
	case <-time.After(d):
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked
}

// release opens the gate for good.
func (g *statusGate) release() { g.once.Do(func() { close(g.released) }) }

type gatedClient struct {
	client.Client
	gate *statusGate
}

func (c gatedClient) Status() client.SubResourceWriter {
	return gatedStatus{SubResourceWriter: c.Client.Status(), gate: c.gate}
}

type gatedStatus struct {
	client.SubResourceWriter
	gate *statusGate
}

func (s gatedStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.gate.pass(ctx, obj); err != nil {
		return err
	}
	held := s.gate.holds(obj)
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	if held {
		s.gate.mu.Lock()
		s.gate.ended = time.Now()
		s.gate.mu.Unlock()
	}
	return err
}

// endedAt returns when the API server answered the write the gate held,
// and whether it did.
func (g *statusGate) endedAt() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ended, !g.ended.IsZero()
}

var _ = Describe("Controller in a manager: a status write that StatusMaxWait forces", Ordered, func() {
	gate := newStatusGate("behind", 2)
	r := startStatusWaitRigThrough("widget-status-behind",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond}, gate.wrap)

	It("runs off the worker: the pass an event starts meanwhile runs its handler during the write, then writes over it", func(ctx context.Context) {
		var (
			mu     sync.Mutex
			during bool
		)
		// Pass 1 holds its status back; pass 2 may no longer hold and
		// writes, and its write waits at the gate; pokes in passes 1 and 2
		// make pass 3 due.
		seen, _ := r.written(ctx, "behind", passPlan{mayWait: true, poke: []int{1, 2}, onPass: func(n int) {
			if n == 3 {
				mu.Lock()
				// The write may not have reached the server yet.
				during = gate.blockingWithin(3 * time.Second)
				mu.Unlock()
				gate.release()
			}
		}})
		mu.Lock()
		defer mu.Unlock()
		Expect(during).To(BeTrue(), "pass 3's handler ran while pass 2's status write was on its way")
		Expect(seen).To(Equal([]int{0, 2, 3}), "pass 2's status is written, then pass 3's over it")
		Expect(r.timesOf("behind").n).To(Equal(3), "no pass ran again for a write that conflicted")
	})
})

var _ = Describe("Controller in a manager: a pass that fails after a status write off the worker", Ordered, func() {
	gate := newStatusGate("then-fails", 2)
	r := startStatusWaitRigThrough("widget-status-behind-then-fails",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond}, gate.wrap)

	It("writes its error over that status, keeping the fields it did not set as that write left them", func(ctx context.Context) {
		// As above, and pass 3, which read the widget before pass 2's
		// write landed, fails without setting childCount; pass 4, its
		// retry, succeeds.
		seen, _ := r.written(ctx, "then-fails", passPlan{mayWait: true, poke: []int{1, 2}, fail: []int{3}, onPass: func(n int) {
			if n == 3 {
				gate.blockingWithin(3 * time.Second)
				gate.release()
			}
		}})
		Expect(seen).To(Equal([]int{0, 2, 4}), "pass 3's failure is written with pass 2's childCount, not the one pass 3 read")
	})
})

var _ = Describe("Controller in a manager: a complete status after a status write off the worker", Ordered, func() {
	gate := newStatusGate("back", 2)
	r := startStatusWaitRigThrough("widget-status-behind-back",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond}, gate.wrap)

	It("is written as the handler set it, also a field that went back to the value the pass read", func(ctx context.Context) {
		// As above, and every pass says its status is complete; pass 3,
		// which read the widget before pass 2's write landed, finds the
		// count it read (0) again.
		seen, _ := r.written(ctx, "back", passPlan{mayWait: true, complete: true, poke: []int{1, 2},
			count: func(n int) int {
				if n == 3 {
					return 0
				}
				return n
			},
			onPass: func(n int) {
				if n == 3 {
					gate.blockingWithin(3 * time.Second)
					gate.release()
				}
			}})
		Expect(seen).To(Equal([]int{0, 2, 0}), "pass 3's count is written over pass 2's, though it is the one pass 3 read")
	})
})

var _ = Describe("Controller in a manager: a status write off the worker that fails", Ordered, func() {
	gate := newStatusGate("refused", 2)
	gate.fail = true
	m := newBehindMetrics()
	r := startStatusWaitRigThrough("widget-status-behind-refused",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond, Metrics: m.metrics}, gate.wrap)

	It("queues the object again, and the next pass writes its status", func(ctx context.Context) {
		// Pass 1 holds its status back and pokes; pass 2 may no longer
		// hold, and its write is refused. No event comes after it: only
		// the Controller can queue the widget again before the resync.
		seen, _ := r.written(ctx, "refused", passPlan{mayWait: true, poke: []int{1}})
		Expect(seen).To(Equal([]int{0, 3}), "pass 2's status is refused; pass 3, queued for it, writes its own")
		Expect(m.writes(Default, r.name, "conflict")).To(Equal(1.0), "the refused write is counted")
		Eventually(func(g Gomega) float64 { return m.writes(g, r.name, "written") }).Should(Equal(1.0),
			"pass 3's write, off the worker too, landed")
	})
})

var _ = Describe("Controller in a manager: a status write off the worker that the API server never answers", Ordered, func() {
	gate := newStatusGate("stuck", 2)
	m := newBehindMetrics()
	r := startStatusWaitRigThrough("widget-status-behind-stuck",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond, StatusWriteTimeout: 3 * time.Second, Metrics: m.metrics}, gate.wrap)
	AfterAll(gate.release)

	It("gives up after StatusWriteTimeout, counts the failure and queues the object again", func(ctx context.Context) {
		// Pass 1 holds its status back and pokes; pass 2's write waits at
		// a gate that opens only after 10 s. The write's timeout ends it
		// before.
		seen, _ := r.written(ctx, "stuck", passPlan{mayWait: true, poke: []int{1}})
		Expect(seen).To(Equal([]int{0, 3}), "pass 2's write gives up; pass 3, queued for it, writes its own")
		Expect(m.writes(Default, r.name, "failed")).To(Equal(1.0), "the write that gave up is counted as failed")
	})
})

var _ = Describe("Controller in a manager: an object deleted while a status write off the worker is on its way", Ordered, func() {
	gate := newStatusGate("deleted", 2)
	m := newBehindMetrics()
	r := startStatusWaitRigThrough("widget-status-behind-deleted",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond, Metrics: m.metrics}, gate.wrap)
	AfterAll(gate.release)

	It("runs the handler's Delete only once the write has ended", func(ctx context.Context) {
		// Pass 1 holds its status back and pokes; pass 2's write waits at
		// the gate while the widget is deleted.
		r.setPlan("deleted", passPlan{mayWait: true, poke: []int{1}})
		w := newWidget(r.ns, "deleted", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		Expect(gate.blockingWithin(10*time.Second)).To(BeTrue(), "pass 2's write waits at the gate")
		Expect(cp.Client.Delete(ctx, w)).To(Succeed())
		// Give a deletion that did not wait the time to run.
		Consistently(func() bool { _, ok := r.deletedAt("deleted"); return ok }, "1s", "50ms").Should(BeFalse(),
			"no Delete while the write is on its way")
		gate.release()
		Eventually(func(g Gomega) bool {
			err := cp.Client.Get(ctx, client.ObjectKeyFromObject(w), &widgetv1.Widget{})
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return apierrors.IsNotFound(err)
		}, "10s").Should(BeTrue(), "the widget is finalized once the write ended")
		deleted, _ := r.deletedAt("deleted")
		ended, ok := gate.endedAt()
		Expect(ok).To(BeTrue(), "the held write reached the API server")
		Expect(deleted).To(BeTemporally(">", ended), "Delete began after the API server answered the write")
		// The deletion changed the widget since pass 2 read it: the
		// write's resourceVersion guard refuses it.
		Expect(m.writes(Default, r.name, "conflict")).To(Equal(1.0), "the write ended, refused by its guard")
		Expect(m.writes(Default, r.name, "written") + m.writes(Default, r.name, "failed")).To(BeZero())
	})
})

var _ = Describe("Controller in a manager: a pass waiting for a status write off the worker when the manager stops", Ordered, func() {
	gate := newStatusGate("stopping", 2)
	r := startStatusWaitRigThrough("widget-status-behind-stopping",
		controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond}, gate.wrap)
	AfterAll(gate.release)

	It("ends at once without an error, leaving the write to run out", func(ctx context.Context) {
		// As in the first spec, pass 2's write waits at the gate and pass
		// 3 runs meanwhile; the manager stops during pass 3's handler, so
		// pass 3 then waits for the write with its context ended.
		var stoppedAt time.Time
		r.setPlan("stopping", passPlan{mayWait: true, poke: []int{1, 2}, onPass: func(n int) {
			if n == 3 {
				gate.blockingWithin(3 * time.Second)
				stoppedAt = time.Now()
				r.stop()
			}
		}})
		errorsBefore := reconcileErrors(Default, r.name)
		Expect(cp.Client.Create(ctx, newWidget(r.ns, "stopping", true))).To(Succeed())
		Eventually(r.stopped, "20s").Should(BeClosed())
		Expect(time.Since(stoppedAt)).To(BeNumerically("<", 5*time.Second),
			"the manager stopped without waiting for the gate (10 s)")
		Expect(r.timesOf("stopping").n).To(Equal(3))
		Expect(reconcileErrors(Default, r.name)).To(Equal(errorsBefore), "no pass ended in an error")
	})
})

// reconcileErrors returns controller-runtime's count of the passes of the
// named controller that returned an error.
func reconcileErrors(g Gomega, name string) float64 {
	n, err := testenv.MetricSum(crmetrics.Registry, "controller_runtime_reconcile_errors_total", map[string]string{"controller": name})
	g.Expect(err).NotTo(HaveOccurred())
	return n
}
