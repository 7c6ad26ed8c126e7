package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	tphandler "github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/testenv"
)

// queueAdds returns how many items the work queue of the named controller
// made ready so far (controller-runtime's workqueue_adds_total).
func queueAdds(g Gomega, name string) float64 {
	n, err := testenv.MetricSum(crmetrics.Registry, "workqueue_adds_total", map[string]string{"name": name})
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

// passPlan is what the handler does in each pass of one widget: pass n
// (from 1) sets status.childCount to n, calls StatusMayWait when mayWait
// is set, and, for n in poke, or in every pass until pokeFor has passed
// since the widget's first pass, creates a ConfigMap that is an event of
// the widget and waits until that event has reached the work queue, so
// that another pass is due before this one ends.
type passPlan struct {
	mayWait bool
	poke    []int
	pokeFor time.Duration
	// onPass, when set, is called with n at the start of pass n.
	onPass func(n int)
	// fail are the passes that fail (a retryable error) without setting
	// childCount.
	fail []int
	// count, when set, is the childCount pass n sets, in place of n.
	count func(n int) int
	// complete makes each pass call StatusComplete.
	complete bool
}

// countOf is the childCount pass n of a widget with plan sets.
func (plan passPlan) countOf(n int) int {
	if plan.count != nil {
		return plan.count(n)
	}
	return n
}

// pokeLabel names the widget a ConfigMap is an event of.
const pokeLabel = "test.trustplane.dev/poke"

// startWithPokes runs, until the suite ends, a manager with a Controller
// named name of widgets, with handler h and options opts, in which a
// ConfigMap labelled pokeLabel with a widget's name is an event of that
// widget: a poke that does not change the widget itself.
func startWithPokes(name string, h handlerFunc, opts controller.Options) {
	startWithPokesThrough(name, "", h, opts, nil)
}

// startWithPokesThrough is startWithPokes with the Controller's client
// wrapped by wrap (nil: the manager's client as it is), watching only
// namespace ns (empty: every namespace). A spec that counts the
// controller's passes or errors needs its own namespace: the widgets other
// specs leave behind are reconciled too. It returns stop, which stops the
// manager before the suite ends, and stopped, closed once the manager's
// Start returned.
func startWithPokesThrough(name, ns string, h tphandler.Handler[*widgetv1.Widget], opts controller.Options, wrap func(client.Client) client.Client) (
	stop context.CancelFunc, stopped <-chan struct{}) {
	mo := ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}}
	if ns != "" {
		mo.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	}
	mgr, err := ctrl.NewManager(cp.Config, mo)
	Expect(err).NotTo(HaveOccurred())
	cl := mgr.GetClient()
	if wrap != nil {
		cl = wrap(cl)
	}
	c := controller.New(name, cl, h, opts)
	pokes := func(b *builder.Builder) *builder.Builder {
		return b.Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if w, ok := o.GetLabels()[pokeLabel]; ok {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: w}}}
			}
			return nil
		}))
	}
	Expect(controller.SetupWithManager(mgr, c, func() *widgetv1.Widget { return &widgetv1.Widget{} }, pokes)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(cancel)
	return cancel, done
}

// poke creates the ConfigMap named name that is an event of widget w.
func poke(ctx context.Context, w *widgetv1.Widget, name string) {
	Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: w.Namespace, Name: name, Labels: map[string]string{pokeLabel: w.Name},
	}})).To(Succeed())
}

// statusWaitRig runs a Controller of widgets whose handler follows each
// widget's passPlan, and reads the statuses the Controller writes.
type statusWaitRig struct {
	name   string
	ns     string
	mu     sync.Mutex
	plans  map[string]passPlan
	passes map[string]*passTimes
	// deleted is when the handler's Delete of each widget began.
	deleted map[string]time.Time
	// stop stops the rig's manager; stopped is closed once it stopped.
	stop    context.CancelFunc
	stopped <-chan struct{}
}

// rigHandler is the rig's Handler: CreateOrUpdate follows the widget's
// plan, and Delete records when it began.
type rigHandler struct{ r *statusWaitRig }

func (h rigHandler) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error {
	return h.r.pass(ctx, w)
}

func (h rigHandler) Delete(_ context.Context, w *widgetv1.Widget) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if _, ok := h.r.deleted[w.Name]; !ok {
		h.r.deleted[w.Name] = time.Now()
	}
	return nil
}

// deletedAt returns when the handler's Delete of widget name began, and
// whether it did.
func (r *statusWaitRig) deletedAt(name string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.deleted[name]
	return at, ok
}

// passTimes is when a widget's first pass began, when its last pass that
// poked ended, how many passes it made and how long the longest took.
type passTimes struct {
	first, pokesEnd time.Time
	n               int
	longest         time.Duration
}

// startStatusWaitRig starts the rig's Controller, named name, with opts,
// in a BeforeAll of the enclosing Ordered container.
func startStatusWaitRig(name string, opts controller.Options) *statusWaitRig {
	return startStatusWaitRigThrough(name, opts, nil)
}

// startStatusWaitRigThrough is startStatusWaitRig with the Controller's
// client wrapped by wrap (startWithPokesThrough).
func startStatusWaitRigThrough(name string, opts controller.Options, wrap func(client.Client) client.Client) *statusWaitRig {
	r := &statusWaitRig{name: name, plans: map[string]passPlan{}, passes: map[string]*passTimes{}, deleted: map[string]time.Time{}}
	BeforeAll(func(ctx context.Context) {
		// Its own namespace only: a pass over a widget another spec left
		// behind, cut off when the manager stops, would count as an error
		// of this controller.
		r.ns = newNamespace(ctx)
		r.stop, r.stopped = startWithPokesThrough(name, r.ns, rigHandler{r}, opts, wrap)
	})
	return r
}

// pass is the rig's handler.
func (r *statusWaitRig) pass(ctx context.Context, w *widgetv1.Widget) error {
	began := time.Now()
	r.mu.Lock()
	t, ok := r.passes[w.Name]
	if !ok {
		t = &passTimes{first: began}
		r.passes[w.Name] = t
	}
	t.n++
	n, plan := t.n, r.plans[w.Name]
	r.mu.Unlock()
	if plan.onPass != nil {
		plan.onPass(n)
	}
	if slices.Contains(plan.fail, n) {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.longest = max(t.longest, time.Since(began))
		return ctrlerrors.RetryableErrorf("pass %d fails", n)
	}
	w.Status.ChildCount = plan.countOf(n)
	if plan.complete {
		controller.StatusComplete(ctx)
	}
	if plan.mayWait {
		controller.StatusMayWait(ctx)
	}
	poked := slices.Contains(plan.poke, n) || began.Sub(t.first) < plan.pokeFor
	if poked {
		before := queueAdds(Default, r.name)
		poke(ctx, w, fmt.Sprintf("%s-poke-%d", w.Name, n))
		Eventually(func(g Gomega) float64 { return queueAdds(g, r.name) }).Should(BeNumerically(">", before),
			"the edit's event reaches the queue while the pass runs")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.longest = max(t.longest, time.Since(began))
	if poked {
		t.pokesEnd = time.Now()
	}
	return nil
}

// setPlan makes plan the plan of the widget named name.
func (r *statusWaitRig) setPlan(name string, plan passPlan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plans[name] = plan
}

// timesOf returns the pass times of widget name so far.
func (r *statusWaitRig) timesOf(name string) passTimes {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.passes[name]; ok {
		return *t
	}
	return passTimes{}
}

// written creates a widget named name with plan and returns the
// childCount of every status the server held for it, in order, once a
// status of its last pass was written and Ready, and no pass followed it
// within a second; at are the times the watch told of each.
func (r *statusWaitRig) written(ctx context.Context, name string, plan passPlan) (seen []int, at []time.Time) {
	r.setPlan(name, plan)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wc := watchClient()
	watcher, err := wc.Watch(ctx, &widgetv1.WidgetList{}, client.InNamespace(r.ns),
		client.MatchingFields{"metadata.name": name})
	Expect(err).NotTo(HaveOccurred())
	defer watcher.Stop()
	Expect(cp.Client.Create(ctx, newWidget(r.ns, name, true))).To(Succeed())
	for {
		select {
		case ev, open := <-watcher.ResultChan():
			if !open {
				Fail(fmt.Sprintf("the watch of %s ended; the statuses written: %v", name, seen))
			}
			got, ok := ev.Object.(*widgetv1.Widget)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			if len(seen) == 0 || seen[len(seen)-1] != got.Status.ChildCount {
				seen, at = append(seen, got.Status.ChildCount), append(at, time.Now())
			}
		case <-time.After(time.Second):
			if n := r.timesOf(name).n; n > 0 && len(seen) > 0 && seen[len(seen)-1] == plan.countOf(n) {
				Expect(condition.IsReady(get(ctx, newWidget(r.ns, name, true)).(*widgetv1.Widget))).To(BeTrue())
				return seen, at
			}
		case <-ctx.Done():
			Fail(fmt.Sprintf("the status of the last pass of %s was not written in 30s; the statuses written: %v", name, seen))
		}
	}
}

var _ = Describe("Controller in a manager: a status that may wait (StatusMayWait)", Ordered, func() {
	r := startStatusWaitRig("widget-status-wait", controller.Options{Config: config.Default()})

	It("leaves a status held back to the pass an event started meanwhile", func(ctx context.Context) {
		seen, _ := r.written(ctx, "waits", passPlan{mayWait: true, poke: []int{1}})
		Expect(seen).To(Equal([]int{0, 2}), "the first pass's status is never written: the second, due before it ended, leaves its own")
	})

	It("writes a status at least once per StatusMaxWait while events keep coming, and no more often", func(ctx context.Context) {
		const pokeFor = 2500 * time.Millisecond
		maxWait := controller.DefaultStatusMaxWait
		seen, at := r.written(ctx, "busy", passPlan{mayWait: true, pokeFor: pokeFor})
		t := r.timesOf("busy")
		// The last pass that made an event began before pokeFor and the
		// pass it started began after; the end of the first lies before
		// pokeFor by at most the queue's hand-over, well under 100ms.
		Expect(t.pokesEnd.Sub(t.first)).To(BeNumerically(">=", pokeFor-100*time.Millisecond), "events came during every pass for %s", pokeFor)
		// While events keep coming, a write comes at most StatusMaxWait
		// after the first status held back since the last write, which
		// the pass after that write holds, plus the pass that then writes
		// and the one the wait ended during.
		bound := maxWait + 3*t.longest + 500*time.Millisecond
		stretches := []time.Time{t.first}
		for _, w := range at[1:] {
			if w.Before(t.pokesEnd) {
				stretches = append(stretches, w)
			}
		}
		stretches = append(stretches, t.pokesEnd)
		for i := 1; i < len(stretches); i++ {
			Expect(stretches[i].Sub(stretches[i-1])).To(BeNumerically("<=", bound),
				"no status written for that long while events kept coming (passes up to %s): statuses %v of %d passes", t.longest, seen, t.n)
		}
		// Each write while events keep coming starts a wait of StatusMaxWait.
		Expect(len(seen)-1).To(BeNumerically("<=", int(t.pokesEnd.Sub(t.first)/maxWait)+2),
			"statuses %v of %d passes over %s", seen, t.n, t.pokesEnd.Sub(t.first).Round(time.Millisecond))
	})

	It("writes the status of a pass that did not say it may wait, also when another pass is due", func(ctx context.Context) {
		seen, _ := r.written(ctx, "never-waits", passPlan{poke: []int{1}})
		Expect(seen).To(Equal([]int{0, 1, 2}))
	})

	It("writes a status held back once the delay is over when no event came, without running the handler again", func(ctx context.Context) {
		start := time.Now()
		seen, _ := r.written(ctx, "nothing-due", passPlan{mayWait: true})
		Expect(seen).To(Equal([]int{0, 1}))
		Expect(time.Since(start)).To(BeNumerically(">=", controller.StatusWaitDelay), "held back for the delay")
		Expect(r.timesOf("nothing-due").n).To(Equal(1), "the held status is written as the pass left it")
	})
})

var _ = Describe("Controller in a manager: a long StatusMaxWait", Ordered, func() {
	r := startStatusWaitRig("widget-status-wait-long", controller.Options{Config: config.Default(), StatusMaxWait: time.Hour})

	It("holds back the statuses of passes whose events keep coming, and writes the last", func(ctx context.Context) {
		seen, _ := r.written(ctx, "keeps-coming", passPlan{mayWait: true, poke: []int{1, 2, 3}})
		Expect(seen).To(Equal([]int{0, 4}), "passes 1 to 3 each had an event come during them; only pass 4's status is written")
	})
})

var _ = Describe("Controller in a manager: the shortest StatusMaxWait", Ordered, func() {
	r := startStatusWaitRig("widget-status-wait-short", controller.Options{Config: config.Default(), StatusMaxWait: time.Nanosecond})

	It("holds back one pass's status at most, so every other pass writes while events keep coming", func(ctx context.Context) {
		seen, _ := r.written(ctx, "every-other", passPlan{mayWait: true, poke: []int{1, 2, 3}})
		Expect(seen).To(Equal([]int{0, 2, 4}), "pass 1 holds its status back, pass 2 writes its own though an event came during it, pass 3 holds back, pass 4 writes")
	})
})

var _ = Describe("StatusMayWait outside a pass", func() {
	It("does nothing, and a pass's notes start empty", func(ctx context.Context) {
		controller.StatusMayWait(ctx)
		passCtx, notes := controller.WithPassNotes(ctx)
		Expect(notes.StatusMayWait()).To(BeFalse())
		controller.StatusMayWait(passCtx)
		Expect(notes.StatusMayWait()).To(BeTrue())
	})
})

var _ = Describe("StatusMayWait without a counting queue", func() {
	It("writes the status at once when the Controller is reconciled without the builder's queue", func(ctx context.Context) {
		ns := newNamespace(ctx)
		w := newWidget(ns, "no-queue", true)
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		served := true
		c := controller.New("widget-no-queue", watchClient(), handlerFunc(func(ctx context.Context, w *widgetv1.Widget) error {
			w.Status.ChildCount = 7
			served = controller.PassServesEvents(ctx)
			controller.StatusMayWait(ctx)
			return nil
		}), controller.Options{Config: config.Default()})
		res, err := reconcileOnce(ctx, c, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ctx, w).(*widgetv1.Widget).Status.ChildCount).To(Equal(7), "no event could be told, so nothing is held back")
		Expect(res.RequeueAfter).To(BeNumerically(">", controller.StatusWaitDelay), "the resync, not a requeue for a held status")
		Expect(served).To(BeFalse(), "no event could be told, so no pass serves one")
	})
})

var _ = Describe("Controller in a manager: a pass tells an event from a requeue (PassServesEvents)", Ordered, func() {
	const name = "widget-serves-events"
	// servesPlan is what the handler does in pass n (from 1) of one
	// widget: poke makes an event of the widget while the pass runs, and
	// fail makes the pass fail with a retryable error.
	type servesPlan struct{ poke, fail []int }
	var (
		mu     sync.Mutex
		plans  = map[string]servesPlan{}
		serves = map[string][]bool{}
		ns     string
	)
	BeforeAll(func(ctx context.Context) {
		h := handlerFunc(func(ctx context.Context, w *widgetv1.Widget) error {
			mu.Lock()
			serves[w.Name] = append(serves[w.Name], controller.PassServesEvents(ctx))
			n, plan := len(serves[w.Name]), plans[w.Name]
			mu.Unlock()
			if slices.Contains(plan.poke, n) {
				before := queueAdds(Default, name)
				poke(ctx, w, fmt.Sprintf("%s-poke-%d", w.Name, n))
				Eventually(func(g Gomega) float64 { return queueAdds(g, name) }).Should(BeNumerically(">", before),
					"the edit's event reaches the queue while the pass runs")
			}
			if slices.Contains(plan.fail, n) {
				return ctrlerrors.RetryableErrorf("pass %d fails", n)
			}
			return nil
		})
		cfg := config.Default()
		// A resync every 300ms: the passes that only it starts.
		cfg.RequeueAfter, cfg.RequeueAfterOnError, cfg.JitterFactor = 300*time.Millisecond, 300*time.Millisecond, 0
		startWithPokes(name, h, controller.Options{Config: cfg})
		ns = newNamespace(ctx)
	})

	// passes creates widget w with plan and returns, once it made at
	// least n passes, whether each served events.
	passes := func(ctx context.Context, w *widgetv1.Widget, plan servesPlan, n int) []bool {
		mu.Lock()
		plans[w.Name] = plan
		mu.Unlock()
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		return servedBy(&mu, serves, w.Name, n)
	}

	It("tells the passes the resync starts from those an event starts", func(ctx context.Context) {
		w := newWidget(ns, "resyncs", true)
		got := passes(ctx, w, servesPlan{}, 3)
		Expect(got[:3]).To(Equal([]bool{true, false, false}), "the creation is an event; the resync's passes serve none")
		n := len(got)
		poke(ctx, w, "resyncs-poke")
		Eventually(func() []bool { return servedBy(&mu, serves, w.Name, n+1)[n:] }).Should(ContainElement(true),
			"the pass that serves the poke knows it")
	})

	It("tells the pass after one an event came during that it serves the event", func(ctx context.Context) {
		got := passes(ctx, newWidget(ns, "poked-during", true), servesPlan{poke: []int{1}}, 3)
		Expect(got[:3]).To(Equal([]bool{true, true, false}))
	})

	It("tells a retry after a failed pass that it serves no event", func(ctx context.Context) {
		got := passes(ctx, newWidget(ns, "retries", true), servesPlan{fail: []int{1, 2}}, 3)
		Expect(got[:3]).To(Equal([]bool{true, false, false}))
	})
})

// servedBy waits until widget name made at least n passes and returns
// whether each served events.
func servedBy(mu *sync.Mutex, serves map[string][]bool, name string, n int) []bool {
	var got []bool
	EventuallyWithOffset(1, func() int {
		mu.Lock()
		defer mu.Unlock()
		got = slices.Clone(serves[name])
		return len(got)
	}).WithTimeout(30*time.Second).Should(BeNumerically(">=", n), "passes of %s", name)
	return got
}

var _ = Describe("PassServesEvents outside a pass", func() {
	It("is false outside a pass, and true in a handler's test of an event's pass", func(ctx context.Context) {
		Expect(controller.PassServesEvents(ctx)).To(BeFalse())
		passCtx, _ := controller.WithPassNotes(ctx)
		Expect(controller.PassServesEvents(passCtx)).To(BeFalse())
		eventCtx, _ := controller.WithEventPassNotes(ctx)
		Expect(controller.PassServesEvents(eventCtx)).To(BeTrue())
	})
})
