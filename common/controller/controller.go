package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/object"
	"github.com/trustplane/trustplane/common/scoped"
)

// Options configure a Controller.
type Options struct {
	// Config holds the framework settings (requeue, jitter, environment).
	Config config.Config
	// Recorder emits events; nil disables events.
	Recorder events.EventRecorder
	// Metrics records reconcile metrics; nil disables metrics.
	Metrics *Metrics
	// Random returns a value in [0,1) for jitter; nil means math/rand/v2.
	Random func() float64
	// APIReader reads uncached (the manager's GetAPIReader), to confirm
	// that children of Live types are gone; nil reads through the client.
	APIReader client.Reader
	// StatusMaxWait is the longest the statuses of an object's passes are
	// held back (StatusMayWait), from the first held back since its status
	// was last written; zero means Config.StatusMaxWait, or
	// DefaultStatusMaxWait when that is zero too, and a negative value
	// holds no status back.
	StatusMaxWait time.Duration
	// StatusWriteTimeout bounds a status write that a pass leaves running
	// off the worker once StatusMaxWait is over; zero or negative means
	// DefaultStatusWriteTimeout. A write that runs out of it fails, and the
	// object is queued again unless a pass is already waiting for it.
	StatusWriteTimeout time.Duration
	// FirstPasses, when set, is told of the end of every pass (see
	// FirstPasses.Passed).
	FirstPasses *FirstPasses
}

// statusWriteTimeout is o.StatusWriteTimeout, or its default when not
// positive.
func (o Options) statusWriteTimeout() time.Duration {
	if o.StatusWriteTimeout > 0 {
		return o.StatusWriteTimeout
	}
	return DefaultStatusWriteTimeout
}

// Controller runs the reconcile lifecycle of kind T around a Handler.
type Controller[T object.Object] struct {
	// unreachable holds the kinds of children warnUnreachable warned of.
	unreachable sync.Map
	name        string
	client      client.Client
	handler     handler.Handler[T]
	opts        Options
	// emitted remembers the state each object's events last announced, so a
	// reconcile that reads a stale cached copy does not announce it again.
	emitted *transitions
	// written remembers each object's last write by this controller, so a
	// pass that reads a cached copy older than that write works from the
	// object the write left.
	written *ownWrites
	// events counts the events that made a pass of each object due, and
	// keeps the statuses held back (StatusMayWait).
	events *eventCounts
	// behind keeps the status writes left running off the worker.
	behind *behindWrites
	// confirmed remembers the objects whose Live children a Withdraw
	// confirmed gone, so their later passes need not read them uncached.
	confirmed *janitor.ConfirmedGone
}

// New returns a Controller named name (used in logs, events and metrics)
// that reads and writes through c and delegates business logic to h.
func New[T object.Object](name string, c client.Client, h handler.Handler[T], opts Options) *Controller[T] {
	opts.Metrics.addController(name)
	if opts.StatusMaxWait == 0 {
		opts.StatusMaxWait = opts.Config.StatusMaxWait
	}
	return &Controller[T]{name: name, client: c, handler: h, opts: opts, emitted: newTransitions(), written: newOwnWrites(time.Now), events: newEventCounts(opts.StatusMaxWait, time.Now),
		behind: newBehindWrites(), confirmed: janitor.NewConfirmedGone()}
}

// Name returns the controller name.
func (c *Controller[T]) Name() string { return c.name }

// Reconcile runs one pass of the lifecycle for req, using obj (a fresh, empty
// object of kind T) as the buffer to read into.
func (c *Controller[T]) Reconcile(ctx context.Context, req ctrl.Request, obj T) (ctrl.Result, error) {
	log := logf.FromContext(ctx).WithValues("controller", c.name, "object", req.NamespacedName)
	ctx = logf.IntoContext(ctx, log)
	ctx, notes := WithPassNotes(ctx)
	notes.since, notes.servesEvents = c.events.begin(req.NamespacedName)
	defer c.opts.FirstPasses.Passed(c.name, req.NamespacedName)

	if err := object.StatusInPlace(obj); err != nil {
		return ctrl.Result{}, err
	}
	if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return c.forget(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, fmt.Errorf("get %s: %w", req.NamespacedName, err)
	}
	if written := c.written.since(req.NamespacedName, obj.GetResourceVersion()); written != nil {
		// The cache has not shown the controller's own last write yet:
		// work from the object that write left.
		obj = written.DeepCopyObject().(T)
	}
	if env, ok := c.environment(obj); ok && !c.opts.Config.Reconciles(env) {
		// Another instance's environment: nothing of the object is
		// written here, its deletion included (that instance finalizes
		// it), and what this instance remembers of it goes, as for an
		// object deleted: the handler's claims of its time here
		// included, and the Ready it announced, so that the object
		// coming back is judged afresh.
		log.V(1).Info("left to the instance of its environment", "environment", env)
		return c.forget(ctx, req.NamespacedName)
	}
	// A status write off the worker is never pending here when a status is
	// held back: the pass that held it took any write before it, and the
	// passes after it take the held status first.
	if h, held, eventSince := c.events.takeHeld(req.NamespacedName); held &&
		!eventSince && obj.GetDeletionTimestamp() == nil && obj.GetResourceVersion() == h.orig.GetResourceVersion() {
		// Nothing came since the pass that held its status back.
		return c.writeHeld(ctx, h)
	}

	var (
		res    ctrl.Result
		err    error
		result string
	)
	if obj.GetDeletionTimestamp() != nil {
		if _, err := c.behind.take(ctx, req.NamespacedName); err != nil {
			return c.passEnded(ctx, err), nil
		}
		res, result, err = c.finalize(ctx, obj)
	} else {
		res, result, err = c.reconcile(ctx, obj)
	}
	c.opts.Metrics.observe(c.name, result)
	if err != nil {
		log.Error(err, "reconcile failed", "result", result)
	}
	return res, err
}

// forget drops what the Controller and its handler remember of the object
// key names, once a status write left running off the worker for it has
// ended: the object is gone, or is another instance's now.
func (c *Controller[T]) forget(ctx context.Context, key types.NamespacedName) (ctrl.Result, error) {
	if _, err := c.behind.take(ctx, key); err != nil {
		return c.passEnded(ctx, err), nil
	}
	c.opts.Metrics.setReady(c.name, key, "")
	c.emitted.forget(key)
	c.written.forget(key)
	c.events.forget(key)
	c.confirmed.Forget(key)
	if f, ok := c.handler.(handler.Forgetter); ok {
		f.Forget(key)
	}
	return ctrl.Result{}, nil
}

func (c *Controller[T]) reconcile(ctx context.Context, obj T) (ctrl.Result, string, error) {
	orig := obj.DeepCopyObject().(T)

	env, ok := c.environment(obj)
	if !ok {
		msg := fmt.Sprintf("add the label %s=<environment> to reconcile this object, or start the operator with --%s",
			labels.Environment, config.KeyDefaultEnvironment)
		hErr := ctrlerrors.WithReason(condition.ReasonMissingEnvironment, ctrlerrors.BlockedErrorf("%s", msg))
		// No requeue: adding the label is an update event that reconciles at once.
		_, result, err := c.finish(ctx, obj, orig, hErr)
		return ctrl.Result{}, result, err
	}

	if err := c.updateFinalizer(ctx, obj, true); err != nil {
		return ctrl.Result{}, ResultError, fmt.Errorf("add finalizer: %w", err)
	}
	if now, ok := c.environment(obj); !ok || now != env {
		// Another instance labelled the object with its environment
		// first (a read after the finalizer's conflict shows it): the
		// next pass decides whose it is.
		return ctrl.Result{RequeueAfter: c.opts.Config.RequeueAfterOnError}, ResultRetryable, nil
	}
	if obj.GetResourceVersion() != orig.GetResourceVersion() {
		// The finalizer's patch (or a read after its conflict) changed obj.
		orig = obj.DeepCopyObject().(T)
	}

	j, err := c.janitor(c.scopedClient(env), obj)
	if err != nil {
		return ctrl.Result{}, ResultError, err
	}
	hErr := callHandler(ctx, "CreateOrUpdate", func() error { return c.handler.CreateOrUpdate(janitor.IntoContext(ctx, j), obj) })
	if hErr == nil {
		// The pass succeeded: the children it did not write of the types it
		// declared are stale.
		if _, err := j.Cleanup(ctx); err != nil {
			hErr = fmt.Errorf("clean up children: %w", err)
		}
		c.warnUnreachable(ctx, j)
	}
	return c.finish(ctx, obj, orig, hErr)
}

// warnUnreachable logs, once per kind, the children a pass wrote where no
// owner reference reaches them and that the handler's OwnedTypes do not
// list: they would outlive their owner.
func (c *Controller[T]) warnUnreachable(ctx context.Context, j *janitor.Client) {
	var owned []janitor.ChildType
	if o, ok := c.handler.(handler.Owner); ok {
		owned = o.OwnedTypes()
	}
	for _, gvk := range j.Unreachable(owned) {
		if _, warned := c.unreachable.LoadOrStore(gvk, true); !warned {
			logf.FromContext(ctx).Error(fmt.Errorf("children of kind %s are written where no owner reference reaches them (another namespace) and OwnedTypes does not list their type", gvk.Kind),
				"they will outlive their owners: list their type in the handler's OwnedTypes")
		}
	}
}

// finalize runs Handler.Delete and removes the finalizer once it succeeded.
// It needs no environment label, so that an unlabelled object's deletion
// never gets stuck; an object of an environment this instance does not
// reconcile (config.Config.Environments) is left to its own instance.
func (c *Controller[T]) finalize(ctx context.Context, obj T) (ctrl.Result, string, error) {
	defer c.opts.Metrics.setReady(c.name, client.ObjectKeyFromObject(obj), "")
	defer c.emitted.forget(client.ObjectKeyFromObject(obj))
	defer c.written.forget(client.ObjectKeyFromObject(obj))
	defer c.events.forget(client.ObjectKeyFromObject(obj))
	defer c.confirmed.Forget(client.ObjectKeyFromObject(obj))
	if !controllerutil.ContainsFinalizer(obj, labels.Finalizer) {
		return ctrl.Result{}, ResultDeleted, nil
	}
	orig := obj.DeepCopyObject().(T)
	sc := scoped.AnyEnvironment(c.client)
	if env, ok := c.environment(obj); ok {
		sc = c.scopedClient(env)
	}
	j, err := c.janitor(sc, obj)
	if err != nil {
		return ctrl.Result{}, ResultError, err
	}
	if hErr := callHandler(ctx, "Delete", func() error { return c.handler.Delete(janitor.IntoContext(ctx, j), obj) }); hErr != nil {
		hErr = fmt.Errorf("delete: %w", hErr)
		return c.finish(ctx, obj, orig, hErr)
	}
	if o, ok := c.handler.(handler.Owner); ok {
		gone, err := j.Withdraw(ctx, inEveryEnvironment(o.OwnedTypes())...)
		if err == nil && !gone {
			err = ctrlerrors.RetryableWithDelayErrorf(c.opts.Config.RequeueAfterOnError, "waiting for the children of %s to be deleted", obj.GetName())
		}
		if err != nil {
			return c.finish(ctx, obj, orig, fmt.Errorf("delete children: %w", err))
		}
	}
	if err := c.updateFinalizer(ctx, obj, false); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, ResultDeleted, nil
		}
		return ctrl.Result{}, ResultError, fmt.Errorf("remove finalizer: %w", err)
	}
	return ctrl.Result{}, ResultDeleted, nil
}

// inEveryEnvironment returns types, each made Live: on deletion the
// owner's children are looked for in every environment by its UID, so one
// written while the owner carried an earlier environment label (a label
// edited just before the deletion) goes too, and each is confirmed gone.
func inEveryEnvironment(types []janitor.ChildType) []janitor.ChildType {
	out := make([]janitor.ChildType, len(types))
	for i, t := range types {
		t.Live = true
		out[i] = t
	}
	return out
}

// ReasonHandlerPanicked is the Ready reason of a pass whose handler
// panicked.
const ReasonHandlerPanicked = "HandlerPanicked"

// callHandler runs the handler's method what through call, and turns a
// panic into an error of reason ReasonHandlerPanicked, logged with its
// stack: the pass fails as with any other error (conditions written,
// retried with backoff, no cleanup of children), whoever called Reconcile.
func callHandler(ctx context.Context, what string, call func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = ctrlerrors.WithReason(ReasonHandlerPanicked, fmt.Errorf("the handler's %s panicked: %v", what, p))
			logf.FromContext(ctx).Error(err, "handler panicked", "stack", string(debug.Stack()))
		}
	}()
	return call()
}

// janitor returns the janitor of one pass for obj's children.
func (c *Controller[T]) janitor(sc *scoped.Client, obj T) (*janitor.Client, error) {
	return janitor.New(sc, obj, janitor.WithLiveReader(c.opts.APIReader), janitor.WithConfirmedGone(c.confirmed))
}

// scopedClient returns the client of environment env; the configured default
// environment also holds objects without the label.
func (c *Controller[T]) scopedClient(env string) *scoped.Client {
	return scoped.For(c.client, env, c.opts.Config.DefaultEnvironment)
}

// environment returns the object's environment by scoped.EnvironmentOf.
func (c *Controller[T]) environment(obj T) (string, bool) {
	return scoped.EnvironmentOf(obj, c.opts.Config.DefaultEnvironment)
}

// finish maps the handler's error to conditions and a requeue, writes the
// status if it changed and emits transition events.
func (c *Controller[T]) finish(ctx context.Context, obj, orig T, hErr error) (ctrl.Result, string, error) {
	w, err := c.behind.take(ctx, client.ObjectKeyFromObject(obj))
	if err != nil {
		return c.passEnded(ctx, err), ResultRetryable, nil
	}
	if w != nil && w.written != nil && w.readVersion == orig.GetResourceVersion() {
		// The pass read the object before the status write an earlier
		// pass left running landed: the handler's work stands on what
		// that write left (a status write changes no spec), and this
		// pass's status is written over it: as the handler set it when it
		// said so (StatusComplete), else each field the pass left as it
		// read it takes the write's value.
		written := w.written.(T)
		if over, err := overWritten(obj, orig, written, !passNotesOf(ctx).statusComplete); err != nil {
			// Not rebased: the write below conflicts, and the pass runs
			// again on a fresh read.
			logf.FromContext(ctx).Error(err, "reading the status a write off the worker left")
		} else {
			obj, orig = over, written.DeepCopyObject().(T)
		}
	}
	res, result, retErr := c.classify(hErr)
	switch result {
	case ResultSuccess:
		condition.Set(obj, condition.NewDone())
		condition.Set(obj, condition.NewReady(""))
	case ResultBlocked:
		condition.Set(obj, condition.NewBlocked(hErr.Error()))
		condition.Set(obj, condition.NewNotReady(ctrlerrors.Reason(hErr, condition.ReasonBlocked), hErr.Error()))
	default:
		condition.Set(obj, condition.NewProcessing(hErr.Error()))
		condition.Set(obj, condition.NewNotReady(ctrlerrors.Reason(hErr, condition.ReasonError), hErr.Error()))
	}
	condition.Repair(obj)
	stampGeneration(obj)
	// A condition whose status is the one read keeps the time read: also
	// one a handler sets by hand, or Repair rewrites, on every pass.
	keepTransitionTimes(obj, orig, metav1.Now())

	changed := statusChanged(orig, obj)
	if changed {
		if after, held := c.holdStatus(ctx, obj, orig, result, res); held {
			// Its events and metrics come with its write (writeHeld), or
			// with the status of the pass that writes instead.
			logf.FromContext(ctx).V(1).Info("status held back", "for", after)
			return ctrl.Result{RequeueAfter: after}, result, retErr
		}
		if c.mayWriteBehind(ctx, result) {
			c.writeBehind(ctx, obj, orig)
			return res, result, retErr
		}
	}
	if err := c.writeStatus(ctx, obj, orig, changed); err != nil {
		if apierrors.IsConflict(err) && hErr == nil {
			// The object changed since it was read: the status describes an
			// outdated object. Run the whole pass again on a fresh read
			// rather than write it.
			log := logf.FromContext(ctx)
			log.V(1).Info("status write conflicted; reconciling again", "error", err.Error())
			return ctrl.Result{RequeueAfter: c.opts.Config.RequeueAfterOnError}, ResultRetryable, nil
		}
		// Never lose the handler's error behind the status error.
		return ctrl.Result{}, ResultError, errors.Join(hErr, fmt.Errorf("write status: %w", err))
	}
	c.events.wrote(client.ObjectKeyFromObject(obj))
	c.announce(orig, obj)
	return res, result, retErr
}

// announce emits the events of obj's transitions from orig and records its
// Ready status in the metrics, once its status is written.
func (c *Controller[T]) announce(orig, obj T) {
	c.emitTransitions(orig, obj)
	ready := "Unknown"
	if r := condition.Find(obj, condition.TypeReady); r != nil {
		ready = string(r.Status)
	}
	c.opts.Metrics.setReady(c.name, client.ObjectKeyFromObject(obj), ready)
}

// classify decides the requeue for a handler error.
func (c *Controller[T]) classify(hErr error) (ctrl.Result, string, error) {
	cfg := c.opts.Config
	resync := ctrl.Result{RequeueAfter: Jitter(cfg.RequeueAfter, cfg.JitterFactor, c.opts.Random)}
	switch {
	case hErr == nil:
		return resync, ResultSuccess, nil
	case ctrlerrors.IsBlocked(hErr):
		return resync, ResultBlocked, nil
	}
	if r, ok := ctrlerrors.AsRetryable(hErr); ok {
		if r.Delay > 0 {
			return ctrl.Result{RequeueAfter: Jitter(r.Delay, cfg.JitterFactor, c.opts.Random)}, ResultRetryable, nil
		}
		// Returning the error hands the retry to the per-item rate limiter.
		return ctrl.Result{}, ResultRetryable, hErr
	}
	return ctrl.Result{}, ResultError, hErr
}

// overWritten returns obj, whose pass read the object read, on written (a
// later version of the object, left by a status write): written's
// metadata with obj's status, in which, when merge is set, each top-level
// field that the pass left as read is taken from written (what the pass
// changed is its own, and the rest is as written, not as read).
func overWritten[T object.Object](obj, read, written T, merge bool) (T, error) {
	// The merge patch from written carries no metadata but the
	// resourceVersion guard when the two agree on what it compares.
	onWritten := func(out T) T {
		out.SetResourceVersion(written.GetResourceVersion())
		out.SetManagedFields(written.GetManagedFields())
		return out
	}
	if !merge {
		return onWritten(obj.DeepCopyObject().(T)), nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return obj, err
	}
	st, _ := u["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
	}
	readSt, _ := statusOf(read).(map[string]any)
	writtenSt, _ := statusOf(written).(map[string]any)
	fields := map[string]struct{}{}
	for _, m := range []map[string]any{st, readSt, writtenSt} {
		for k := range m {
			fields[k] = struct{}{}
		}
	}
	for k := range fields {
		if !equality.Semantic.DeepEqual(st[k], readSt[k]) {
			continue
		}
		if v, ok := writtenSt[k]; ok {
			st[k] = v
		} else {
			delete(st, k)
		}
	}
	u["status"] = st
	out := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, out); err != nil {
		return obj, err
	}
	return onWritten(out), nil
}

// keepTransitionTimes fixes the lastTransitionTime of obj's conditions,
// which were set from an object older than orig (a later version of the
// object, left by a status write): a condition with the status orig has
// takes orig's time, and one whose status differs from orig's but whose
// time is before orig's (kept from the older object) takes now.
func keepTransitionTimes(obj, orig object.Object, now metav1.Time) {
	for i := range obj.CommonStatus().Conditions {
		c := &obj.CommonStatus().Conditions[i]
		o := condition.Find(orig, c.Type)
		switch {
		case o == nil:
		case o.Status == c.Status:
			c.LastTransitionTime = o.LastTransitionTime
		case c.LastTransitionTime.Before(&o.LastTransitionTime):
			c.LastTransitionTime = now
		}
	}
}

// stampGeneration records that the status describes the object's current
// generation, on every condition and in observedGeneration.
func stampGeneration(obj object.Object) {
	gen := obj.GetGeneration()
	s := obj.CommonStatus()
	for i := range s.Conditions {
		s.Conditions[i].ObservedGeneration = gen
	}
	s.ObservedGeneration = gen
}

// holdStatus decides whether a pass that succeeded holds its changed
// status back (StatusMayWait), and keeps it when so: only when the handler
// allowed it, a queue counts the object's events, and the first status
// held back since the object's status was last written was held less than
// StatusMaxWait ago. It returns when to queue the object again for the
// held status. The caller has found the status changed.
func (c *Controller[T]) holdStatus(ctx context.Context, obj, orig T, result string, res ctrl.Result) (time.Duration, bool) {
	notes := passNotesOf(ctx)
	if !notes.statusMayWait || result != ResultSuccess {
		return 0, false
	}
	return c.events.hold(client.ObjectKeyFromObject(obj), heldStatus{
		obj: obj.DeepCopyObject().(client.Object), orig: orig.DeepCopyObject().(client.Object), since: notes.since, res: res,
	})
}

// mayWriteBehind tells whether a pass whose changed status was not held
// back may leave its write running off the worker: when the handler
// allowed its status to wait, the pass succeeded, and a queue counts the
// object's events (the status could have been held back, but
// StatusMaxWait is over).
func (c *Controller[T]) mayWriteBehind(ctx context.Context, result string) bool {
	return passNotesOf(ctx).statusMayWait && result == ResultSuccess && c.events.counting.Load()
}

// passEnded is what a pass returns when its context ended while it waited
// for a status write off the worker (the manager stops): no error, which
// would only be logged and counted at every shutdown, and the object
// queued again should the controller go on.
func (c *Controller[T]) passEnded(ctx context.Context, err error) ctrl.Result {
	logf.FromContext(ctx).V(1).Info("pass ended while a status write off the worker was on its way", "error", err.Error())
	return ctrl.Result{RequeueAfter: c.opts.Config.RequeueAfterOnError}
}

// writeBehind writes obj's status off the worker (behindWrites), for at
// most Options.StatusWriteTimeout, and counts the write by result. Once
// written, it records the write as writeStatus does and announces it; when
// the write fails and no pass took it meanwhile, it queues the object, for
// a pass to compute and write the status again.
func (c *Controller[T]) writeBehind(ctx context.Context, obj, orig T) {
	key := client.ObjectKeyFromObject(obj)
	w := c.behind.start(key, orig.GetResourceVersion())
	obj, orig = obj.DeepCopyObject().(T), orig.DeepCopyObject().(T)
	log := logf.FromContext(ctx)
	// The pass's context may end with the pass; the write must not, and
	// must end for the next pass to take it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.statusWriteTimeout())
	go func() {
		defer close(w.done)
		defer cancel()
		if err := c.writeStatus(ctx, obj, orig, true); err != nil {
			switch {
			case apierrors.IsConflict(err):
				c.opts.Metrics.observeBehind(c.name, behindConflict)
				log.V(1).Info("status write off the worker conflicted; the object is reconciled again", "error", err.Error())
			case apierrors.IsNotFound(err):
				// Gone meanwhile: its NotFound pass forgets it.
				c.opts.Metrics.observeBehind(c.name, behindFailed)
				log.V(1).Info("status write off the worker found the object gone", "error", err.Error())
			default:
				c.opts.Metrics.observeBehind(c.name, behindFailed)
				log.Error(err, "status write off the worker failed; the object is reconciled again")
			}
			// A pass that took the write meanwhile writes its own status.
			c.behind.requeueUntaken(key, w)
			return
		}
		w.written = obj
		c.opts.Metrics.observeBehind(c.name, behindWritten)
		c.events.wrote(key)
		c.announce(orig, obj)
	}()
}

// writeHeld writes the status a pass held back, when no event came since
// and the object is as that pass read it, and returns what that pass
// would have.
func (c *Controller[T]) writeHeld(ctx context.Context, h heldStatus) (ctrl.Result, error) {
	// A status is held back only when it changed.
	if err := c.writeStatus(ctx, h.obj.(T), h.orig.(T), true); err != nil {
		if apierrors.IsConflict(err) {
			logf.FromContext(ctx).V(1).Info("held status write conflicted; reconciling again", "error", err.Error())
			return ctrl.Result{RequeueAfter: c.opts.Config.RequeueAfterOnError}, nil
		}
		return ctrl.Result{}, fmt.Errorf("write status: %w", err)
	}
	c.events.wrote(client.ObjectKeyFromObject(h.obj))
	c.announce(h.orig.(T), h.obj.(T))
	return h.res, nil
}

// statusChanged tells whether obj's status differs from orig's.
func statusChanged(orig, obj client.Object) bool {
	return !equality.Semantic.DeepEqual(statusOf(orig), statusOf(obj))
}

// writeStatus patches the status subresource when the status differs from
// orig, as changed (statusChanged) says. The merge patch carries only the
// changed status fields and is guarded by the resourceVersion that was
// read, so a status computed from an outdated or stale-cached object never
// overwrites a newer one: the write conflicts and the caller reconciles
// again. It records the write, so that the next pass works from the object
// it left even before the cache shows it (ownWrites).
func (c *Controller[T]) writeStatus(ctx context.Context, obj, orig T, changed bool) error {
	key, rv := client.ObjectKeyFromObject(obj), orig.GetResourceVersion()
	if !changed {
		return nil
	}
	if err := c.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return c.explainStatusNotFound(ctx, obj, err)
	}
	if obj.GetResourceVersion() != rv {
		// A patch the server found nothing to change in (a field the schema
		// prunes) leaves the version as read: that read is not outdated.
		c.written.record(key, rv, obj.DeepCopyObject().(client.Object))
	}
	return nil
}

// explainStatusNotFound returns err, the error of a status write of obj,
// saying what to fix when it is NotFound while obj itself is there: the
// kind serves no status subresource (its CRD lacks
// +kubebuilder:subresource:status), which the API server answers with the
// same NotFound as an object deleted meanwhile.
func (c *Controller[T]) explainStatusNotFound(ctx context.Context, obj T, err error) error {
	if !apierrors.IsNotFound(err) {
		return err
	}
	there, ok := obj.DeepCopyObject().(T)
	if !ok || c.client.Get(ctx, client.ObjectKeyFromObject(obj), there) != nil {
		return err
	}
	return fmt.Errorf("%w: %s exists, so its kind serves no status subresource; declare +kubebuilder:subresource:status on the type and regenerate its CRD", err, client.ObjectKeyFromObject(obj))
}

// statusOf returns obj's status as unstructured data, as the API server
// would store it: its Status field alone is converted, not the object's
// metadata and spec, which every pass would pay for twice. An object
// without a Status struct field is converted whole.
func statusOf(obj client.Object) any {
	if v := reflect.ValueOf(obj); v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("Status"); f.IsValid() && f.Kind() == reflect.Struct {
			if u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f.Addr().Interface()); err == nil {
				return u
			}
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return obj
	}
	return u["status"]
}

// updateFinalizer adds or removes the finalizer with a patch guarded by the
// resourceVersion, re-reading the object on conflict, so that finalizers
// added by others at the same time are never dropped.
// stampsEnvironment reports whether a pass labels obj with the default
// environment: obj carries no environment label (or an empty one) and this
// instance reconciles only some environments (config.Config.Environments),
// so that another such instance, whose default environment differs, finds
// the object taken instead of taking it too.
func (c *Controller[T]) stampsEnvironment(obj T) bool {
	cfg := c.opts.Config
	return len(cfg.Environments) > 0 && cfg.DefaultEnvironment != "" && obj.GetLabels()[labels.Environment] == ""
}

func (c *Controller[T]) updateFinalizer(ctx context.Context, obj T, add bool) error {
	key := client.ObjectKeyFromObject(obj)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		stamp := add && c.stampsEnvironment(obj)
		if controllerutil.ContainsFinalizer(obj, labels.Finalizer) == add && !stamp {
			return nil
		}
		before := obj.DeepCopyObject().(client.Object)
		if add {
			controllerutil.AddFinalizer(obj, labels.Finalizer)
			if stamp {
				l := maps.Clone(obj.GetLabels())
				if l == nil {
					l = map[string]string{}
				}
				l[labels.Environment] = c.opts.Config.DefaultEnvironment
				obj.SetLabels(l)
			}
		} else {
			controllerutil.RemoveFinalizer(obj, labels.Finalizer)
		}
		err := c.client.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			c.written.record(key, before.GetResourceVersion(), obj.DeepCopyObject().(client.Object))
		}
		if apierrors.IsConflict(err) {
			if gErr := c.client.Get(ctx, key, obj); gErr != nil {
				return gErr
			}
		}
		return err
	})
}

// emitTransitions emits an event when Ready flips or the object becomes
// Blocked; steady passes emit nothing. The state before the pass is what this
// controller last announced for the object, or orig when it announced nothing
// yet (after a restart), so a stale cached read cannot repeat an event.
func (c *Controller[T]) emitTransitions(orig, obj T) {
	if c.opts.Recorder == nil {
		return
	}
	key := client.ObjectKeyFromObject(obj)
	after := condition.Find(obj, condition.TypeReady)
	now := announced{ready: readyStatus(after), blocked: isBlocked(obj)}
	before, known := c.emitted.swap(key, now)
	if !known {
		before = announced{ready: readyStatus(condition.Find(orig, condition.TypeReady)), blocked: isBlocked(orig)}
	}
	if after != nil && before.ready != now.ready {
		if after.Status == metav1.ConditionTrue {
			c.opts.Recorder.Eventf(obj, nil, "Normal", condition.ReasonReady, "Reconcile", "%s is ready", obj.GetName())
		} else if !now.blocked {
			c.opts.Recorder.Eventf(obj, nil, "Warning", after.Reason, "Reconcile", "%s", after.Message)
		}
	}
	if now.blocked && !before.blocked {
		reason := condition.ReasonBlocked
		if after != nil {
			reason = after.Reason
		}
		c.opts.Recorder.Eventf(obj, nil, "Warning", reason, "Reconcile", "%s", condition.Find(obj, condition.TypeProcessing).Message)
	}
}

func readyStatus(c *metav1.Condition) metav1.ConditionStatus {
	if c == nil {
		return ""
	}
	return c.Status
}

func isBlocked(obj object.Object) bool {
	p := condition.Find(obj, condition.TypeProcessing)
	return p != nil && p.Reason == condition.ReasonBlocked
}
