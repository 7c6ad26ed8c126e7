package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// oneInformer hands out the same informer for every kind.
type oneInformer struct{ inf cache.Informer }

func (o oneInformer) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return o.inf, nil
}

// A pass that ran before the new InferencePool informer's first list
// completed reported PoolCacheNotSynced and waits for its backoff; the
// watcher requeues the bindings to InferencePools when the informer syncs,
// not before (a pass then would report the same again), and never after
// the controller stops. (The informer is a fake, to decide when it syncs;
// the watcher against a real API server is the "InferencePool CRD
// installed after startup" spec.)
func TestTheBindingsToInferencePoolsAreRequeuedOnceTheInformerHasSynced(t *testing.T) {
	s, toPool, toDeployment := twoBindings(t)
	m := &mapper{client: fake.NewClientBuilder().WithScheme(s).WithObjects(toPool, toDeployment).Build()}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(pool.InferencePoolGVK())

	newQueue := func(t *testing.T) queue {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		t.Cleanup(q.ShutDown)
		return q
	}

	t.Run("requeued once synced", func(t *testing.T) {
		inf := controllertest.NewFakeInformer()
		q := newQueue(t)
		if err := m.requeueOnceSynced(context.Background(), oneInformer{inf}, u, q); err != nil {
			t.Fatal(err)
		}
		g := NewWithT(t)
		g.Consistently(q.Len).WithTimeout(300*time.Millisecond).Should(BeZero(), "bindings requeued before the informer synced")
		inf.Synced()
		g.Eventually(q.Len).WithTimeout(10*time.Second).Should(Equal(1), "want the one binding to an InferencePool requeued once the informer synced")
		g.Consistently(q.Len).WithTimeout(200*time.Millisecond).Should(Equal(1), "requeued more than once")
		if got, _ := q.Get(); got.Name != toPool.Name {
			t.Fatalf("requeued %s, want %s", got.Name, toPool.Name)
		}
	})

	t.Run("nothing after the controller stops", func(t *testing.T) {
		inf := controllertest.NewFakeInformer()
		q := newQueue(t)
		ctx, cancel := context.WithCancel(context.Background())
		if err := m.requeueOnceSynced(ctx, oneInformer{inf}, u, q); err != nil {
			t.Fatal(err)
		}
		cancel()
		inf.Synced()
		NewWithT(t).Consistently(q.Len).WithTimeout(300*time.Millisecond).Should(BeZero(), "bindings requeued after the controller stopped")
	})
}
