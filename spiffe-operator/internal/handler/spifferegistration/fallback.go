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
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/labelset"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// yield holds, for a fallback policy, what the policies it yields to
// select: the other non-fallback policies of the instance's class.
type yield struct {
	workloads  []otherPolicy
	pods       []podSelection
	namespaces map[string]*corev1.Namespace
	// held indexes, per namespace and then service account, the workloads
	// others hold, for the namespaces a pass has looked at (heldIn).
	held map[string]map[string][]heldWorkload
	// own answers what the fallback holds of its own; nil holds nothing.
	own *ownEntries
}

// podSelection is what a policy of pods selects.
type podSelection struct {
	sel  workload.Selection
	pods labels.Selector
}

// claim is how far the policies a fallback yields to hold a workload.
type claim int

const (
	// claimNone: no other policy holds it; the fallback registers it.
	claimNone claim = iota
	// claimUnsure: a policy this process has not judged yet selects it
	// and cannot render it; it holds an entry for it only if it kept one
	// from before. The fallback keeps its own entry for it, if it has one
	// (ownEntries.keepsItself).
	claimUnsure
	// claimPresumed: a policy this process judged selects it and did not
	// find it holds nothing for it: it kept a last good entry, or it has
	// not met the workload yet. The fallback yields it, but does not leave
	// another workload unregistered for it unless the fallback has no
	// entry for it (heldIn).
	claimPresumed
	// claimHeld: another policy holds, or will hold, an entry for it.
	claimHeld
)

// otherPolicy is a policy of workloads that a fallback policy yields to,
// for the workloads it selects and holds an entry for (holds).
type otherPolicy struct {
	name string
	sel  workload.Selection
	// compiled is the policy, or nil when its spec fails: it then keeps
	// what it registered, and no more.
	compiled *policy
	// judged is true when a pass of this process rendered the policy;
	// failed are then the workloads of that pass whose render failed or
	// whose entry SPIRE refused.
	judged bool
	failed map[workloadKey]failedWorkload
	// recorded are the last good entries its status records, which its
	// first pass after a start keeps; read while it is not judged.
	recorded map[workloadKey]keptRecord
}

// holds says how far o, which selects w, holds an entry for it. A policy a
// pass of this process judged holds w surely when that pass kept w's last
// good entry; it holds nothing for w when SPIRE refused w's entry, or
// when w's render failed without a last good entry and w does not render
// now either (a label may have been added since). A
// policy not judged yet (its first pass since the start is to come, or
// its environment is not this instance's) holds w when w renders or its
// status records a last good entry for w, and is unsure otherwise. One
// whose spec fails and that no pass judged holds all it selects: the
// fallback yields to it only while its status records a parent it holds
// entries under (othersOf). A workload a judged policy did not find
// failing is presumed held (without a render, which only heldIn needs):
// if the policy has not met it yet and holds nothing for it, its pass
// then wakes the fallback policies (Handler.Notify).
func (o *otherPolicy) holds(w workload.Workload) claim {
	if !o.judged {
		if rec, ok := o.recorded[keyOf(w)]; o.compiled == nil || o.renders(w) || ok && rec.uid == w.UID {
			return claimHeld
		}
		return claimUnsure
	}
	f, failed := o.failed[keyOf(w)]
	switch {
	case !failed:
		return claimPresumed
	case f.refused:
		return claimNone
	case f.kept && f.uid == w.UID || o.renders(w):
		return claimHeld
	}
	return claimNone
}

// rendersElsewhere reports whether a policy the fallback policy p yields
// to selects w and renders it now.
func (p *policy) rendersElsewhere(w workload.Workload) bool {
	ns := p.others.namespaces[w.Namespace]
	for i := range p.others.workloads {
		o := &p.others.workloads[i]
		if o.sel.SelectsWorkload(ns, w) && o.renders(w) {
			return true
		}
	}
	return false
}

// renders reports whether w renders under o now.
func (o *otherPolicy) renders(w workload.Workload) bool {
	if o.compiled == nil {
		return false
	}
	_, f := o.compiled.render(w)
	return f == nil
}

// wideFor reports whether o's entry for w may select every pod of its
// namespace and service account: it carries no pod-label selectors, or
// o's spec fails. A last good entry o keeps for w is judged by its own
// selectors, not by the template o has now.
func (o *otherPolicy) wideFor(w workload.Workload) bool {
	if o.compiled == nil {
		return true
	}
	if f, ok := o.failed[keyOf(w)]; ok && f.kept && f.uid == w.UID {
		return f.wide
	}
	if rec, ok := o.recorded[keyOf(w)]; !o.judged && ok && rec.uid == w.UID {
		return selectsAllPodsOfAccount(&rec.entry)
	}
	return !o.compiled.podSelectors
}

// heldWorkload is a workload another policy holds an entry for.
type heldWorkload struct {
	workload workload.Workload
	policy   string
	wide     bool
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
		compiled, specErr := compile(&o.Spec, h.TrustDomain, h.ClusterName)
		var sel workload.Selection
		if specErr == nil {
			sel = compiled.selection
		} else if len(o.Status.ParentIDs) == 0 {
			continue
		} else if sel, specErr = compileSelection(&o.Spec); specErr != nil {
			continue
		}
		if o.Spec.PodSelector == nil {
			y.workloads = append(y.workloads, h.otherPolicy(ctx, o, sel, compiled))
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

// claimOf says how far the policies the fallback policy p yields to hold
// the workload w: the most any of those that select it does.
func (p *policy) claimOf(w workload.Workload) claim {
	if p.others == nil {
		return claimNone
	}
	ns := p.others.namespaces[w.Namespace]
	out := claimNone
	for i := range p.others.workloads {
		o := &p.others.workloads[i]
		if o.sel.SelectsWorkload(ns, w) {
			if out = max(out, o.holds(w)); out == claimHeld {
				break
			}
		}
	}
	return out
}

// heldIn returns the workloads of namespace that the policies y yields to
// hold or may hold, by service account; read once per pass.
func (y *yield) heldIn(ctx context.Context, lister workload.Lister, namespace string) (map[string][]heldWorkload, error) {
	if held, ok := y.held[namespace]; ok {
		return held, nil
	}
	ns := y.namespaces[namespace]
	held := map[string][]heldWorkload{}
	for kind := range workload.Objects() {
		err := lister.InNamespace(ctx, kind, namespace, func(obj client.Object) {
			w, ok := workload.FromObject(obj)
			if !ok || obj.GetDeletionTimestamp() != nil {
				return
			}
			for i := range y.workloads {
				o := &y.workloads[i]
				if o.sel.SelectsWorkload(ns, w) && y.surelyHeld(ctx, o, w) {
					held[w.ServiceAccount] = append(held[w.ServiceAccount], heldWorkload{workload: w, policy: o.name, wide: o.wideFor(w)})
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("list %ss in namespace %s: %w", kind, namespace, err)
		}
	}
	if y.held == nil {
		y.held = map[string]map[string][]heldWorkload{}
	}
	y.held[namespace] = held
	return held, nil
}

// surelyHeld reports whether o, which selects w, holds it surely enough
// for the fallback to leave another workload unregistered because of it:
// w renders under o, or o may hold it (claimUnsure, claimPresumed) and
// the fallback has no entry for w itself. So a workload o has not met yet,
// or one o cannot render after a restart, does not take the entry of a
// workload beside it that the fallback registers.
func (y *yield) surelyHeld(ctx context.Context, o *otherPolicy, w workload.Workload) bool {
	switch c := o.holds(w); {
	case c == claimNone:
		return false
	case c == claimHeld || c == claimPresumed && o.renders(w):
		return true
	default:
		return y.own == nil || !y.own.keeps(ctx, w)
	}
}

// sharesPods returns a workload another policy holds whose pods the
// fallback policy p's entry e for w would also select, or whose holder's
// entry would also select w's pods: a pod would hold two identities. A
// workload's pods are judged by the labels its spec.selector.matchLabels
// requires of them. nil when there is none.
func (p *policy) sharesPods(ctx context.Context, lister workload.Lister, e *entries.Entry, w workload.Workload) (*heldWorkload, error) {
	if p.others == nil || len(p.others.workloads) == 0 {
		return nil, nil
	}
	sh, ok := entries.ShapeOf(e)
	if !ok {
		sh = entries.PodShape{Namespace: w.Namespace, ServiceAccount: w.ServiceAccount}
	}
	held, err := p.others.heldIn(ctx, lister, sh.Namespace)
	if err != nil {
		return nil, err
	}
	for i := range held[sh.ServiceAccount] {
		hw := &held[sh.ServiceAccount][i]
		if keyOf(hw.workload) == keyOf(w) {
			continue
		}
		if hw.wide || labelset.MapSubset(sh.Labels, hw.workload.MatchLabels) || labelset.MapSubset(hw.workload.MatchLabels, w.MatchLabels) {
			return hw, nil
		}
	}
	return nil, nil
}

// sharedPodsFailure says why the fallback policy leaves w unregistered.
func sharedPodsFailure(w workload.Workload, hw *heldWorkload) v1alpha1.Failure {
	return v1alpha1.Failure{Object: w.String(), Reason: ReasonSharesPodsWithAnotherPolicy,
		Message: fmt.Sprintf("not registered by this fallback policy: its entry and the one policy %s holds for %s would both select the pods "+
			"of one of them (namespace %s, service account %s), which would hold two identities; give one of the two workloads a service account of its own, or select %s in %s",
			hw.policy, hw.workload, w.Namespace, w.ServiceAccount, w, hw.policy)}
}

// ownEntries answers, for a pass of the fallback policy obj, what the
// fallback holds of its own (keeps, keepsItself).
type ownEntries struct {
	h      *Handler
	obj    *v1alpha1.SpiffeRegistration
	p      *policy
	memo   *policyRenders
	wanted map[entries.Key]struct{}
	asked  map[entries.Key]bool
}

// keeps reports whether the fallback holds the entry its memo gives w (its
// render now, or a last good entry, the status's records included): one
// its last pass that synced wanted, or, when this process has no such
// pass (a restart, an edit of the fallback, a pass that failed), one
// SPIRE holds under its ID. SPIRE holds an entry too while pods that used
// it run, so a workload another policy surely holds never asks
// (surelyHeld). Answers from SPIRE are remembered by entry for the pass.
// A per-node or per-pod fallback keeps nothing, nor one whose entry SPIRE
// cannot be asked about.
func (o *ownEntries) keeps(ctx context.Context, w workload.Workload) bool {
	if o.p.byPods() {
		return false
	}
	e := o.memo.lastWanted(o.p, w)
	if e == nil {
		return false
	}
	k := e.Key()
	if o.wanted != nil {
		_, ok := o.wanted[k]
		return ok
	}
	if ok, seen := o.asked[k]; seen {
		return ok
	}
	ok, err := o.h.Syncer.Registered(ctx, o.h.ownerFor(o.obj, o.p), e)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("asking SPIRE whether it holds the fallback's entry for a workload another policy may hold; yielding it",
			"workload", w.String(), "error", err.Error())
	}
	o.asked[k] = ok && err == nil
	return o.asked[k]
}

// keepsItself reports whether the fallback registered w itself at its last
// pass that synced (so not merely an entry w's pods share with a workload
// it registers), or, without such a pass in this process, whether it
// keeps the entry its memo gives w (keeps).
func (o *ownEntries) keepsItself(ctx context.Context, w workload.Workload) bool {
	if o.wanted == nil {
		return o.keeps(ctx, w)
	}
	r := o.memo.byWorkload[keyOf(w)]
	if r == nil || r.uid != w.UID || r.wanted() == nil || o.p.byPods() {
		return false
	}
	_, ok := o.wanted[r.wanted().Key()]
	return ok
}

// otherPolicy returns what the fallback needs of policy o of workloads,
// whose selection is sel and which compiles to compiled (nil when its spec
// fails).
func (h *Handler) otherPolicy(ctx context.Context, o *v1alpha1.SpiffeRegistration, sel workload.Selection, compiled *policy) otherPolicy {
	op := otherPolicy{name: o.Name, sel: sel, compiled: compiled}
	op.failed, op.judged = h.memo.failedBy(o.UID)
	if !op.judged && compiled != nil {
		var err error
		if op.recorded, err = parseKeptEntries(o.Status.KeptEntries, compiled.trustDomain); err != nil {
			logf.FromContext(ctx).V(1).Info("reading another policy's recorded last good entries; the fallback yields it those it cannot read",
				"policy", o.Name, "error", err.Error())
		}
	}
	return op
}

// publishFailed records, for a fallback policy's judgement (holds), the
// workloads among keys whose render failed in the policy obj, with or
// without a last good entry, or whose entry SPIRE refused
// (policyRenders.failedOf; refused are the keys of its entries SPIRE
// refused; beforeSync as for renders.publishFailed), and when that
// changed, asks for a pass of every fallback policy of the class. A
// fallback policy records none.
func (h *Handler) publishFailed(ctx context.Context, obj *v1alpha1.SpiffeRegistration, m *policyRenders, keys iter.Seq[workloadKey],
	refused map[entries.Key]struct{}, beforeSync bool) {
	if obj.Spec.Fallback {
		return
	}
	if !h.memo.publishFailed(obj.UID, m.failedOf(keys, refused), beforeSync) || h.Notify == nil {
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

// refusedOf is refused, the keys of entries SPIRE refused, for a policy
// whose desired entries are those of its workloads; nil for a per-node or
// per-pod policy, whose refused entries are those its pods expand to.
func refusedOf(p *policy, refused map[entries.Key]struct{}) map[entries.Key]struct{} {
	if p.byPods() {
		return nil
	}
	return refused
}

// refusedIn returns the keys of the entries of failed, the entries SPIRE
// refused in a pass; nil when there are none.
func refusedIn(failed []entrysync.Failed) map[entries.Key]struct{} {
	if len(failed) == 0 {
		return nil
	}
	out := make(map[entries.Key]struct{}, len(failed))
	for _, f := range failed {
		out[f.Entry.Key()] = struct{}{}
	}
	return out
}
