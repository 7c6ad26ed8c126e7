package spifferegistration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// yield holds, for a fallback policy, the policies it yields to: the other
// non-fallback policies the instance takes.
type yield struct {
	workloads  []*policy
	pods       []*policy
	namespaces map[string]*corev1.Namespace
}

// othersOf reads the policies the fallback policy obj yields to: those of
// the instance's class and environments. A policy whose spec does not
// compile (it keeps what it registered, but selects nothing new), that is
// being deleted, or that this instance does not reconcile (another
// environment's, or one without an environment label in a strict
// instance: it registers nothing here) is not one of them.
func (h *Handler) othersOf(ctx context.Context, obj *v1alpha1.SpiffeRegistration) (*yield, error) {
	var l v1alpha1.SpiffeRegistrationList
	if err := h.Reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list SpiffeRegistrations: %w", err)
	}
	y := &yield{}
	for i := range l.Items {
		o := &l.Items[i]
		if o.UID == obj.UID || o.Spec.Fallback || o.DeletionTimestamp != nil || !h.Class.Takes(o.Spec.ClassName) ||
			h.Reconciles != nil && !h.Reconciles(o) {
			continue
		}
		op, err := compile(&o.Spec, h.TrustDomain, h.ClusterName)
		if err != nil {
			continue
		}
		if op.pods != nil {
			y.pods = append(y.pods, op)
		} else {
			y.workloads = append(y.workloads, op)
		}
	}
	if len(y.workloads)+len(y.pods) == 0 {
		return nil, nil
	}
	var nsList corev1.NamespaceList
	if err := h.Reader.List(ctx, &nsList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	y.namespaces = make(map[string]*corev1.Namespace, len(nsList.Items))
	for i := range nsList.Items {
		y.namespaces[nsList.Items[i].Name] = &nsList.Items[i]
	}
	return y, nil
}

// takenByOthers reports whether a policy the fallback policy p yields to
// selects the workload w and renders its entry. One whose render fails for
// w registers nothing for it (whoever writes w may drop a label its
// template names), so the fallback keeps it.
func (p *policy) takenByOthers(w workload.Workload) bool {
	if p.others == nil {
		return false
	}
	ns := p.others.namespaces[w.Namespace]
	for _, o := range p.others.workloads {
		if !o.selection.SelectsWorkload(ns, w) {
			continue
		}
		if _, f := o.render(w); f == nil {
			return true
		}
	}
	return false
}

// podTakenByOthers reports whether a policy of pods the fallback policy p
// yields to selects the pod v and renders its entry (on the node the pod
// names).
func (p *policy) podTakenByOthers(v *podView) bool {
	if p.others == nil {
		return false
	}
	ns := p.others.namespaces[v.namespace]
	for _, o := range p.others.pods {
		if !o.selection.SelectsNamespace(ns) || !o.selection.SelectsAccount(v.serviceAccount) || !o.pods.Matches(labels.Set(v.labels)) {
			continue
		}
		if _, f := o.renderPod(v, v.node, o.parentID); f == nil {
			return true
		}
	}
	return false
}
