package controller

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
)

func policy(name string, nsLabels map[string]string) *v1alpha1.SpiffeRegistration {
	p := &v1alpha1.SpiffeRegistration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if nsLabels != nil {
		p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: nsLabels}
	}
	return p
}

// failingReader fails its first fails lists.
type failingReader struct {
	client.Reader
	fails atomic.Int32
}

func (r *failingReader) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if r.fails.Add(-1) >= 0 {
		return errors.New("cache not ready")
	}
	return r.Reader.List(ctx, l, opts...)
}

func newEvents(t *testing.T, fails int32) (*policyEvents, *Notifier) {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		policy("match", map[string]string{"test": "a"}), policy("other", map[string]string{"test": "b"}), policy("all", nil),
	).Build()
	r := &failingReader{Reader: c}
	r.fails.Store(fails)
	n := NewNotifier(spifferegistration.Kind)
	return &policyEvents{reader: r, dirty: spifferegistration.NewDirty(), notifier: n}, n
}

func queued(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var out []string
	for q.Len() > 0 {
		r, _ := q.Get()
		out = append(out, r.Name)
		q.Done(r)
	}
	slices.Sort(out)
	return out
}

func TestANamespaceEventConcernsOnlyThePoliciesSelectingIt(t *testing.T) {
	pe, _ := newEvents(t, 0)
	h := pe.forNamespaces()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx := context.Background()
	ns := func(l map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: l}}
	}

	h.Create(ctx, event.CreateEvent{Object: ns(map[string]string{"test": "a"})}, q)
	if got := queued(q); !slices.Equal(got, []string{"all", "match"}) {
		t.Errorf("create: queued %v", got)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: ns(map[string]string{"test": "a"}), ObjectNew: ns(map[string]string{"test": "b"})}, q)
	if got := queued(q); !slices.Equal(got, []string{"all", "match", "other"}) {
		t.Errorf("relabel: queued %v", got)
	}
	h.Delete(ctx, event.DeleteEvent{Object: ns(map[string]string{"test": "c"})}, q)
	if got := queued(q); !slices.Equal(got, []string{"all"}) {
		t.Errorf("delete: queued %v", got)
	}
}

func TestAFailedPolicyListIsRetriedWithAFullPassOfEveryPolicy(t *testing.T) {
	pe, n := newEvents(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	pe.forNamespaces().Create(ctx, event.CreateEvent{Object: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}, q)
	if q.Len() != 0 {
		t.Fatalf("queued %d requests from a failed list", q.Len())
	}
	notified := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer notified.ShutDown()
	if err := n.source(spifferegistration.Kind).Start(ctx, notified); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, listRetry/10, 5*listRetry, true, func(context.Context) (bool, error) {
		return notified.Len() >= 3, nil
	}); err != nil {
		t.Fatalf("after the failed list, passes of %d policies only", notified.Len())
	}
	got := queued(notified)
	slices.Sort(got)
	if !slices.Equal(got, []string{"all", "match", "other"}) {
		t.Errorf("retried %v", got)
	}
}

// A policy's first pass adds the framework's finalizer; the update event of
// that write must not queue the policy again: with nothing recorded, that
// second pass is a full one, which at 100,000 workloads took seconds right
// after the first pass and delayed the workloads created meanwhile. Status
// writes are dropped the same way; spec and metadata changes pass, as do
// updates of other kinds.
func TestTheFrameworksOwnWritesToAPolicyStartNoPass(t *testing.T) {
	filter := ignoreOwnStatusUpdates()
	before := policy("p", nil)
	before.Generation = 1
	withFinalizer := before.DeepCopy()
	withFinalizer.Finalizers = []string{labels.Finalizer}
	withStatus := withFinalizer.DeepCopy()
	withStatus.Status.EntriesRegistered = 7
	edited := withFinalizer.DeepCopy()
	edited.Generation = 2
	for _, tc := range []struct {
		name     string
		old, new client.Object
		want     bool
	}{
		{"finalizer added", before, withFinalizer, false},
		{"status written", withFinalizer, withStatus, false},
		{"spec edited", withFinalizer, edited, true},
		{"finalizer taken off", withFinalizer, before, true},
		{"a namespace with the finalizer added", &corev1.Namespace{}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{labels.Finalizer}}}, true},
	} {
		if got := filter.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
}
