package spifferegistration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// yield holds, for a fallback policy, what the policies it yields to
// select: the other non-fallback policies of the instance's class.
type yield struct {
	workloads  []workload.Selection
	pods       []podSelection
	namespaces map[string]*corev1.Namespace
}

// podSelection is what a policy of pods selects.
type podSelection struct {
	sel  workload.Selection
	pods labels.Selector
}

// othersOf reads the policies the fallback policy obj yields to: the other
// non-fallback policies of the class that are not being deleted. One whose
// spec does not compile keeps what it registered, so the fallback yields
// to what its selectors select, when they compile, as long as its status
// records a parent it holds entries under; one that holds none (it never
// compiled, say) takes nothing, and neither does one whose selectors do
// not compile.
func (h *Handler) othersOf(ctx context.Context, obj *v1alpha1.SpiffeRegistration) (*yield, error) {
	var l v1alpha1.SpiffeRegistrationList
	if err := h.Reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list SpiffeRegistrations: %w", err)
	}
	y := &yield{}
	for i := range l.Items {
		o := &l.Items[i]
		if o.UID == obj.UID || o.Spec.Fallback || o.DeletionTimestamp != nil || !h.Class.Takes(o.Spec.ClassName) {
			continue
		}
		sel, err := compileSelection(&o.Spec)
		if err != nil {
			continue
		}
		if len(o.Status.ParentIDs) == 0 {
			if _, specErr := compile(&o.Spec, h.TrustDomain, h.ClusterName); specErr != nil {
				continue
			}
		}
		if o.Spec.PodSelector == nil {
			y.workloads = append(y.workloads, sel)
			continue
		}
		pods, perr := metav1.LabelSelectorAsSelector(o.Spec.PodSelector)
		if perr != nil {
			continue
		}
		y.pods = append(y.pods, podSelection{sel: sel, pods: pods})
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
// selects the workload w.
func (p *policy) takenByOthers(w workload.Workload) bool {
	if p.others == nil {
		return false
	}
	ns := p.others.namespaces[w.Namespace]
	for _, sel := range p.others.workloads {
		if sel.SelectsWorkload(ns, w) {
			return true
		}
	}
	return false
}

// podTakenByOthers reports whether a policy of pods the fallback policy p
// yields to selects a pod with these labels, running as serviceAccount in
// namespace.
func (p *policy) podTakenByOthers(namespace, serviceAccount string, podLabels labels.Labels) bool {
	if p.others == nil {
		return false
	}
	ns := p.others.namespaces[namespace]
	for _, o := range p.others.pods {
		if o.sel.SelectsNamespace(ns) && o.sel.SelectsAccount(serviceAccount) && o.pods.Matches(podLabels) {
			return true
		}
	}
	return false
}
