package controller_test

// Attacks on --environments (config.Config.Environments): the skip of
// objects of other environments, the stamping of unlabelled objects with
// the default environment, and the memory a Controller keeps of an object
// that moves between instances. Fake client, no API server:
//
//	go test -run TestAdversarial ./controller/

import (
	"context"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/labels"
)

// forgettingWidget is the widget handler with a handler.Forgetter that
// records which objects it was told to forget (the spiffe-operator's and
// identity-operator's handlers drop claims and memos there).
type forgettingWidget struct {
	widget.Handler
	mu     sync.Mutex
	forgot []types.NamespacedName
}

var _ handler.Forgetter = &forgettingWidget{}

func (h *forgettingWidget) Forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgot = append(h.forgot, key)
}

func atkInstance(c client.Client, h handler.Handler[*widgetv1.Widget], rec events.EventRecorder, defaultEnv string, envs ...string) *controller.Controller[*widgetv1.Widget] {
	cfg := config.Default()
	cfg.DefaultEnvironment = defaultEnv
	cfg.Environments = envs
	return controller.New("widget-"+defaultEnv, c, h, controller.Options{Config: cfg, APIReader: c, Recorder: rec})
}

func atkGet(t *testing.T, c client.Client, key types.NamespacedName) *widgetv1.Widget {
	t.Helper()
	w := &widgetv1.Widget{}
	if err := c.Get(context.Background(), key, w); err != nil {
		t.Fatal(err)
	}
	return w
}

func atkEdit(t *testing.T, c client.Client, key types.NamespacedName, edit func(w *widgetv1.Widget)) {
	t.Helper()
	w := atkGet(t, c, key)
	edit(w)
	if err := c.Update(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

func atkSetEnv(env string, present bool) func(w *widgetv1.Widget) {
	return func(w *widgetv1.Widget) {
		if w.Labels == nil {
			w.Labels = map[string]string{}
		}
		if present {
			w.Labels[labels.Environment] = env
		} else {
			delete(w.Labels, labels.Environment)
		}
	}
}

// TestAdversarialEmptyEnvironmentLabelIsStamped: a tenant (or a GitOps manifest)
// sets trustplane.dev/environment to the empty string. EnvironmentOf reads
// that as "no label", so the stamping must treat it alike. Safe behaviour:
// the first pass of an instance with --environments=a and default a writes
// the finalizer and the label "a" together; a second instance (b, default
// b) then leaves it alone.
func TestAdversarialEmptyEnvironmentLabelIsStamped(t *testing.T) {
	w := attackWidget("team", "w", "", "c1")
	w.Labels = map[string]string{labels.Environment: ""}
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	ia := atkInstance(c, &widget.Handler{}, nil, "a", "a")
	ib := atkInstance(c, &widget.Handler{}, nil, "b", "b")
	if err := attackPass(t, ia, key); err != nil {
		t.Fatal(err)
	}
	got := atkGet(t, c, key)
	if got.Labels[labels.Environment] != "a" || !controllerutil.ContainsFinalizer(got, labels.Finalizer) {
		t.Fatalf("empty label not stamped: labels %v finalizers %v", got.Labels, got.Finalizers)
	}
	rv := got.ResourceVersion
	if err := attackPass(t, ib, key); err != nil {
		t.Fatal(err)
	}
	if got = atkGet(t, c, key); got.ResourceVersion != rv {
		t.Fatalf("instance b wrote the object instance a stamped: labels %v", got.Labels)
	}
}

// TestAdversarialExistingInstallIsStampedOnItsNextPass: an object of an install
// from before --environments already carries the finalizer but no label.
// updateFinalizer returned early for objects that had the finalizer; the
// stamp must not depend on it. Safe behaviour: the next pass of an
// instance with --environments labels it with the default environment,
// so a second instance with another default does not take it as well.
func TestAdversarialExistingInstallIsStampedOnItsNextPass(t *testing.T) {
	w := attackWidget("team", "w", "", "c1")
	w.Finalizers = []string{labels.Finalizer}
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	ia := atkInstance(c, &widget.Handler{}, nil, "a", "a")
	if err := attackPass(t, ia, key); err != nil {
		t.Fatal(err)
	}
	if got := atkGet(t, c, key); got.Labels[labels.Environment] != "a" {
		t.Fatalf("object of an existing install (finalizer already there) not stamped: labels %v", got.Labels)
	}
	ib := atkInstance(c, &widget.Handler{}, nil, "b", "b")
	rv := atkGet(t, c, key).ResourceVersion
	if err := attackPass(t, ib, key); err != nil {
		t.Fatal(err)
	}
	if got := atkGet(t, c, key); got.ResourceVersion != rv {
		t.Fatalf("second instance wrote it: labels %v", got.Labels)
	}
}

// TestAdversarialObjectMovedAwayIsForgottenByItsHandler: a tenant moves their
// object from environment a (instance A) to b (instance B). From then on A
// skips it, but A's handler still holds what it remembers of the object:
// for the spiffe-operator, its claims on SPIRE entries (which mask the next
// claimant of the same entry in A, see entrysync's
// TestAdversarialGhostClaimOfAnObjectMovedAwayMasksForGood), its render memo
// and its pass records. Safe behaviour: the skip tells a handler.Forgetter
// to forget the object, as a NotFound pass does.
func TestAdversarialObjectMovedAwayIsForgottenByItsHandler(t *testing.T) {
	w := attackWidget("team", "w", "a", "c1")
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	h := &forgettingWidget{}
	ia := atkInstance(c, h, nil, "a", "a")
	if err := attackPass(t, ia, key); err != nil {
		t.Fatal(err)
	}
	atkEdit(t, c, key, atkSetEnv("b", true))
	if err := attackPass(t, ia, key); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.forgot) == 0 {
		t.Fatalf("instance a skips %s (now in environment b) but its handler was never told to forget it: "+
			"claims and memos of the object stay in instance a for as long as the object lives", key)
	}
}

// TestAdversarialReturnedObjectAnnouncesItsReadyTransition: the tenant moves the
// object a -> b, breaks it while B has it (B writes Ready=False), repairs
// it and moves it back to a. A's transition memory (c.emitted) still says
// Ready=True from before the move. Safe behaviour: A's pass that turns
// Ready from False (as written by B) to True emits the "is ready" event.
func TestAdversarialReturnedObjectAnnouncesItsReadyTransition(t *testing.T) {
	w := attackWidget("team", "w", "a", "c1")
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	recA := events.NewFakeRecorder(100)
	ia := atkInstance(c, &widget.Handler{}, recA, "a", "a")
	ib := atkInstance(c, &widget.Handler{}, nil, "b", "b")
	if err := attackPass(t, ia, key); err != nil {
		t.Fatal(err)
	}
	if first := drain(recA); !strings.Contains(strings.Join(first, "|"), "is ready") {
		t.Fatalf("setup: the first pass announced %v", first)
	}
	atkEdit(t, c, key, func(w *widgetv1.Widget) { atkSetEnv("b", true)(w); w.Spec.Children = nil })
	_ = attackPass(t, ia, key) // skipped
	if err := attackPass(t, ib, key); err != nil {
		t.Fatal(err)
	}
	if r := readyOf(atkGet(t, c, key)); r != metav1.ConditionFalse {
		t.Fatalf("setup: B should have written Ready=False, got %q", r)
	}
	atkEdit(t, c, key, func(w *widgetv1.Widget) { atkSetEnv("a", true)(w); w.Spec.Children = []string{"c1"} })
	if err := attackPass(t, ia, key); err != nil {
		t.Fatal(err)
	}
	if r := readyOf(atkGet(t, c, key)); r != metav1.ConditionTrue {
		t.Fatalf("A did not make it Ready again: %q", r)
	}
	got := drain(recA)
	if !strings.Contains(strings.Join(got, "|"), "is ready") {
		t.Fatalf("A turned Ready False->True on its return but announced nothing (stale c.emitted from before the move): events %v", got)
	}
}

func readyOf(w *widgetv1.Widget) metav1.ConditionStatus {
	for _, c := range w.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status
		}
	}
	return ""
}

func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
