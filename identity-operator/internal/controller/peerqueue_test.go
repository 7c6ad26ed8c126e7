package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	opcontroller "github.com/trustplane/trustplane/identity-operator/internal/controller"
)

// queued drains q and returns what was in it.
func queued(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []types.NamespacedName {
	var out []types.NamespacedName
	for q.Len() > 0 {
		r, _ := q.Get()
		out = append(out, r.NamespacedName)
		q.Done(r)
	}
	return out
}

// The binding's own watch and the watch that requeues its peers are fed by
// the informer separately, a few milliseconds apart: a binding added by
// both was taken by a worker after the first addition and passed again
// after the second. The peers' watch leaves the binding itself to its own,
// whose predicate passes every change the peers' watch acts on.
var _ = Describe("Requeueing a binding's peers", func() {
	It("queues the peers of a changed, created or deleted binding, and the binding itself only through its own watch", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		a := createBinding(ctx, ns, "a", "serving", "v1")
		b := createBinding(ctx, ns, "b", "serving", "v1")
		var cachedA *v1alpha1.IdentityBinding
		Eventually(func(g Gomega) {
			var l v1alpha1.IdentityBindingList
			g.Expect(operatorCache.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			g.Expect(l.Items).To(HaveLen(2))
			for i := range l.Items {
				if l.Items[i].Name == a.Name {
					cachedA = l.Items[i].DeepCopy()
				}
			}
		}).Should(Succeed())

		h := opcontroller.NewPeerHandler(operatorCache, spiffeid.RequireTrustDomainFromString(trustDomain))
		own := controller.OwnWritesDropped()
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		DeferCleanup(q.ShutDown)
		peerOfA := []types.NamespacedName{{Namespace: ns, Name: b.Name}}

		changed := cachedA.DeepCopy()
		changed.Spec.ServiceAccountName = "other"
		changed.Generation++
		update := event.UpdateEvent{ObjectOld: cachedA, ObjectNew: changed}
		Expect(own.Update(update)).To(BeTrue(), "the binding's own watch queues a spec change")
		h.Update(ctx, update, q)
		Expect(queued(q)).To(ConsistOf(peerOfA), "a spec change")

		moved := cachedA.DeepCopy()
		moved.Labels = map[string]string{labels.Environment: "elsewhere"}
		update = event.UpdateEvent{ObjectOld: cachedA, ObjectNew: moved}
		Expect(own.Update(update)).To(BeTrue(), "the binding's own watch queues an environment change")
		h.Update(ctx, update, q)
		Expect(queued(q)).To(ConsistOf(peerOfA), "an environment change")

		deleting := cachedA.DeepCopy()
		now := metav1.Now()
		deleting.DeletionTimestamp = &now
		update = event.UpdateEvent{ObjectOld: cachedA, ObjectNew: deleting}
		Expect(own.Update(update)).To(BeTrue(), "the binding's own watch queues the deletion mark")
		h.Update(ctx, update, q)
		Expect(queued(q)).To(ConsistOf(peerOfA), "the deletion mark")

		Expect(own.Create(event.CreateEvent{Object: cachedA})).To(BeTrue())
		h.Create(ctx, event.CreateEvent{Object: cachedA}, q)
		Expect(queued(q)).To(ConsistOf(peerOfA), "a creation")

		Expect(own.Delete(event.DeleteEvent{Object: cachedA})).To(BeTrue())
		h.Delete(ctx, event.DeleteEvent{Object: cachedA}, q)
		Expect(queued(q)).To(ConsistOf(peerOfA), "a deletion")
	})
})
