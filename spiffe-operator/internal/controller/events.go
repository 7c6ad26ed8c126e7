package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/class"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// listRetry is how soon policies are listed again after a failed list in
// an event handler.
const listRetry = time.Second

// policyEvents maps workload and namespace events to the policies they may
// concern, recording the change for incremental passes first.
type policyEvents struct {
	reader   client.Reader
	dirty    *spifferegistration.Dirty
	notifier *Notifier
	// class says which policies this instance takes.
	class class.Filter
}

// forWorkloads handles events of workloads of kind: every policy selecting
// that kind gets an incremental pass for the workload.
func (pe *policyEvents) forWorkloads(kind v1alpha1.WorkloadKind) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		reqs := pe.policies(ctx, func(p *v1alpha1.SpiffeRegistration) bool {
			kinds := p.Spec.WorkloadKinds
			if len(kinds) == 0 {
				kinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindDeployment}
			}
			return slices.Contains(kinds, kind)
		})
		for _, r := range reqs {
			pe.dirty.Workload(r.Name, kind, obj.GetNamespace(), obj.GetName())
		}
		return reqs
	})
}

// forNamespaces handles namespace events: a namespace concerns the policies
// whose namespaceSelector selects it, before or after the change; each gets
// a full pass.
func (pe *policyEvents) forNamespaces() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], sets ...labels.Set) {
		for _, r := range pe.policies(ctx, func(p *v1alpha1.SpiffeRegistration) bool { return selectsAny(p, sets) }) {
			pe.dirty.All(r.Name)
			q.Add(r)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object.GetLabels())
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object.GetLabels())
		},
	}
}

// forNodeBound handles node events: they concern the policies with
// per-node parents (no spec.parentID), per-pod entries or a podSelector,
// each of which gets a full pass.
func (pe *policyEvents) forNodeBound() handler.EventHandler {
	return pe.fullPassesIn(nodeBound)
}

// nodeBound reports whether what p registers depends on the pods that run
// and on the nodes they run on.
func nodeBound(p *v1alpha1.SpiffeRegistration) bool {
	return p.Spec.ParentID == "" || p.Spec.EntryGranularity == v1alpha1.EntryPerPod || p.Spec.PodSelector != nil
}

// forPods handles pod events: they concern the node-bound policies whose
// namespaceSelector selects the pod's namespace. A policy of pods
// (podSelector) gets a full pass; any other an incremental pass for the
// pod's service account, the only one whose entries the pod can change.
func (pe *policyEvents) forPods() handler.EventHandler {
	return pe.passesIn(nodeBound, func(p *v1alpha1.SpiffeRegistration, obj client.Object) {
		if pod, ok := obj.(*pods.Object); ok && p.Spec.PodSelector == nil {
			pe.dirty.Account(p.Name, pod.Namespace, pod.ServiceAccount)
			return
		}
		pe.dirty.All(p.Name)
	})
}

// forServices handles Service events: they concern the policies with
// autoPopulateDNSNames whose namespaceSelector selects the Service's
// namespace; each gets a full pass.
func (pe *policyEvents) forServices() handler.EventHandler {
	return pe.fullPassesIn(func(p *v1alpha1.SpiffeRegistration) bool { return p.Spec.AutoPopulateDNSNames })
}

// fullPassesIn returns a handler that gives a full pass to every policy for
// which concerns is true and whose namespaceSelector selects the event
// object's namespace (every such policy for a cluster-scoped object, or
// when the namespace cannot be read).
func (pe *policyEvents) fullPassesIn(concerns func(*v1alpha1.SpiffeRegistration) bool) handler.EventHandler {
	return pe.passesIn(concerns, func(p *v1alpha1.SpiffeRegistration, _ client.Object) { pe.dirty.All(p.Name) })
}

// passesIn returns a handler that queues every policy for which concerns
// is true and whose namespaceSelector selects the event object's namespace
// (every such policy for a cluster-scoped object, or when the namespace
// cannot be read), recording the change for each first.
func (pe *policyEvents) passesIn(concerns func(*v1alpha1.SpiffeRegistration) bool,
	record func(p *v1alpha1.SpiffeRegistration, obj client.Object)) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		var sets []labels.Set
		if ns := obj.GetNamespace(); ns != "" {
			var nsObj corev1.Namespace
			if err := pe.reader.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err == nil {
				sets = []labels.Set{nsObj.Labels}
			}
		}
		return pe.policies(ctx, func(p *v1alpha1.SpiffeRegistration) bool {
			if concerns(p) && (sets == nil || selectsAny(p, sets)) {
				record(p, obj)
				return true
			}
			return false
		})
	})
}

// forFallbacks handles events of policies: what a policy selects decides
// what the fallback policies register, so each other fallback policy gets a
// full pass.
func (pe *policyEvents) forFallbacks() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		reqs := pe.policies(ctx, func(p *v1alpha1.SpiffeRegistration) bool { return p.Spec.Fallback && p.UID != obj.GetUID() })
		for _, r := range reqs {
			pe.dirty.All(r.Name)
		}
		return reqs
	})
}

// selectsAny reports whether p's namespaceSelector selects a namespace with
// any of the label sets. A selector that does not parse counts as selecting,
// so the policy's pass reports it.
func selectsAny(p *v1alpha1.SpiffeRegistration, sets []labels.Set) bool {
	if p.Spec.NamespaceSelector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector)
	if err != nil {
		return true
	}
	for _, s := range sets {
		if sel.Matches(s) {
			return true
		}
	}
	return false
}

// policies returns the policies for which concerns is true. When they
// cannot be listed, the error is logged and every policy gets a full pass
// once a list succeeds again, so no event is lost.
func (pe *policyEvents) policies(ctx context.Context, concerns func(*v1alpha1.SpiffeRegistration) bool) []reconcile.Request {
	var l v1alpha1.SpiffeRegistrationList
	if err := pe.reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		logf.FromContext(ctx).Error(err, "listing SpiffeRegistrations for an event; every policy gets a full pass once they can be listed")
		pe.retryAll(ctx, listRetry)
		return nil
	}
	out := make([]reconcile.Request, 0, len(l.Items))
	for i := range l.Items {
		if pe.class.Takes(l.Items[i].Spec.ClassName) && concerns(&l.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: l.Items[i].Name}})
		}
	}
	return out
}

// retryAll lists the policies after delay (doubling while lists fail, up to
// a minute) and asks for a full pass of each.
func (pe *policyEvents) retryAll(ctx context.Context, delay time.Duration) {
	time.AfterFunc(delay, func() {
		if ctx.Err() != nil {
			return
		}
		var l v1alpha1.SpiffeRegistrationList
		if err := pe.reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
			logf.FromContext(ctx).Error(fmt.Errorf("list SpiffeRegistrations: %w", err), "retrying")
			pe.retryAll(ctx, min(2*delay, time.Minute))
			return
		}
		for i := range l.Items {
			if !pe.class.Takes(l.Items[i].Spec.ClassName) {
				continue
			}
			pe.dirty.All(l.Items[i].Name)
			pe.notifier.Notify(entrysync.Owner{Kind: spifferegistration.Kind, Name: l.Items[i].Name})
		}
	})
}

// forFederations handles SpiffeFederation events, status changes included:
// the policies whose federatesWith names its trust domain get a full pass,
// so that entries SPIRE refused for want of the trust domain's bundle are
// retried as soon as the relationship is made, not at the next resync.
func (pe *policyEvents) forFederations() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		f, ok := obj.(*v1alpha1.SpiffeFederation)
		if !ok {
			return nil
		}
		reqs := pe.policies(ctx, func(p *v1alpha1.SpiffeRegistration) bool {
			return slices.Contains(p.Spec.FederatesWith, f.Spec.TrustDomain)
		})
		for _, r := range reqs {
			pe.dirty.All(r.Name)
		}
		return reqs
	})
}
