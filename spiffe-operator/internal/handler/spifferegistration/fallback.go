package spifferegistration

import (
	"context"
	"fmt"
	"iter"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// yield holds, for a fallback policy, what the policies it yields to
// select: the other non-fallback policies of the instance's class.
type yield struct {
	workloads  []otherPolicy
	pods       []podSelection
	namespaces map[string]*corev1.Namespace
}

// podSelection is what a policy of pods selects.
type podSelection struct {
	sel  workload.Selection
	pods labels.Selector
}

// otherPolicy is a policy of workloads that a fallback policy yields to,
// for the workloads it selects and holds an entry for (holds).
type otherPolicy struct {
	sel workload.Selection
	// compiled is the policy, or nil when its spec fails: it then keeps
	// what it registered, and the fallback yields it all it selects.
	compiled *policy
	// judged is true when a pass of this process rendered the policy;
	// unheld are then the workloads it selected that failed to render and
	// kept no last good entry.
	judged bool
	unheld map[workloadKey]struct{}
}

// holds reports whether o holds an entry for w, or may on its next pass:
// w renders under o, or its render fails and o may keep a last good
// entry. Only a policy a pass of this process judged is known to keep
// none: one of an environment this instance does not run, or one whose
// first pass since the start has yet to come, is taken to keep one. A
// workload o has not judged yet, whose render fails, counts as held too:
// o's pass then wakes the fallback policies (Handler.Notify).
func (o *otherPolicy) holds(w workload.Workload) bool {
	if o.compiled == nil || !o.judged {
		return true
	}
	if _, unheld := o.unheld[keyOf(w)]; !unheld {
		return true
	}
	// It may render since (a label was added): then o registers it.
	_, f := o.compiled.render(w)
	return f == nil
}

// othersOf reads the policies the fallback policy obj yields to: the other
// non-fallback policies of the class that are not being deleted. A policy
// of workloads takes those it holds an entry for (otherPolicy.holds). One
// whose spec does not compile keeps what it registered, so the fallback
// yields to what its selectors select, when they compile, as long as its
// status records a parent it holds entries under; one that holds none (it
// never compiled, say) takes nothing, and neither does one whose selectors
// do not compile.
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
		compiled, specErr := compile(&o.Spec, h.TrustDomain, h.ClusterName)
		if specErr != nil && len(o.Status.ParentIDs) == 0 {
			continue
		}
		if o.Spec.PodSelector == nil {
			y.workloads = append(y.workloads, h.otherPolicy(o, sel, compiled))
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
	for i := range p.others.workloads {
		o := &p.others.workloads[i]
		if o.sel.SelectsWorkload(ns, w) && o.holds(w) {
			return true
		}
	}
	return false
}

// otherPolicy returns what the fallback needs of policy o of workloads,
// whose selection is sel and which compiles to compiled (nil when its spec
// fails).
func (h *Handler) otherPolicy(o *v1alpha1.SpiffeRegistration, sel workload.Selection, compiled *policy) otherPolicy {
	op := otherPolicy{sel: sel, compiled: compiled}
	if compiled != nil {
		op.unheld, op.judged = h.memo.unheldBy(o.UID)
	}
	return op
}

// publishUnheld records, for a fallback policy's judgement (holds), the
// workloads among keys that the policy obj selects but holds no entry
// for, and when some were not so before, asks for a pass of every
// fallback policy of the class. A fallback policy records none.
func (h *Handler) publishUnheld(ctx context.Context, obj *v1alpha1.SpiffeRegistration, m *policyRenders, keys iter.Seq[workloadKey]) {
	if obj.Spec.Fallback {
		return
	}
	if !h.memo.publishUnheld(obj.UID, m.unheldOf(keys)) || h.Notify == nil {
		return
	}
	var l v1alpha1.SpiffeRegistrationList
	if err := h.Reader.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		logf.FromContext(ctx).Error(err, "listing SpiffeRegistrations to wake the fallback policies; they register the workloads this policy cannot render at their next pass")
		return
	}
	for i := range l.Items {
		fb := &l.Items[i]
		if fb.Spec.Fallback && fb.DeletionTimestamp == nil && h.Class.Takes(fb.Spec.ClassName) {
			h.Notify(entrysync.Owner{Kind: Kind, Name: fb.Name})
		}
	}
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
