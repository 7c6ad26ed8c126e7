package spifferegistration

import (
	"context"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
)

// podView is what a policy of pods renders from one pod.
type podView struct {
	uid, namespace, name, serviceAccount, node string
	ownerKind, ownerName                       string
	labels, annotations                        map[string]string
}

func (v *podView) String() string { return "Pod " + v.namespace + "/" + v.name }

// podPass is the pass of a policy of pods (spec.podSelector): every running
// pod it selects gets an entry of its own, with its k8s:pod-uid selector.
// Such policies always make full passes; pod events queue them.
func (h *Handler) podPass(ctx context.Context, obj *v1alpha1.SpiffeRegistration, p *policy) error {
	var nsList corev1.NamespaceList
	if err := h.Reader.List(ctx, &nsList, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	var selected []podView
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if !p.selection.SelectsNamespace(ns) {
			continue
		}
		err := h.podSource().InNamespace(ctx, ns.Name, func(pod *pods.Object) {
			// spec.serviceAccountName narrows a policy of pods as it does
			// one of workloads: whoever may create pods in the namespace
			// can copy the labels under another account.
			if !p.selection.SelectsAccount(pod.ServiceAccount) || !p.pods.Matches(pod.LabelSet) ||
				p.podTakenByOthers(pod.Namespace, pod.ServiceAccount, pod.LabelSet) {
				return
			}
			kind, name := pods.Owner(pod)
			selected = append(selected, podView{uid: string(pod.UID), namespace: pod.Namespace, name: pod.Name,
				serviceAccount: pod.ServiceAccount, node: pod.NodeName, ownerKind: kind, ownerName: name,
				labels: pod.LabelSet.Map(), annotations: pod.Annotations})
		})
		if err != nil {
			return err
		}
	}
	var (
		rendered []*entries.Entry
		failures []v1alpha1.Failure
		nodes    = h.nodeParents(p)
	)
	for i := range selected {
		v := &selected[i]
		parent, ok, err := nodes.parentFor(ctx, v.node)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		// {nodeName} only renders the name of an existing Node: whoever
		// creates a pod may set spec.nodeName to anything.
		nodeName := ""
		if v.node != "" {
			np, err := nodes.of(ctx, v.node)
			if err != nil {
				return err
			}
			if np.exists {
				nodeName = v.node
			}
		}
		e, f := p.renderPod(v, nodeName, parent)
		if f != nil {
			failures = append(failures, *f)
			continue
		}
		if p.autoDNS {
			if e, err = h.withServiceNames(ctx, e, v.namespace, v.labels); err != nil {
				return err
			}
		}
		rendered = append(rendered, e)
	}
	failures = append(failures, nodes.failures...)
	want := merge(rendered)
	owner := h.ownerFor(obj, p)
	out, syncErr := h.Syncer.Sync(ctx, owner, want, entrysync.ParseParents(obj.Status.ParentIDs))
	obj.Status.ParentIDs = out.Parents
	for _, f := range out.Failed {
		failures = append(failures, v1alpha1.Failure{Object: f.Entry.SpiffeID.String(), Reason: f.Reason, Message: f.Message})
	}
	return h.report(ctx, obj, owner, counts{
		selected: len(selected), desired: len(want), registered: len(out.Registered), masked: len(out.Masked),
		spireFailed: len(out.Failed), retained: out.Retained, talked: out.Talked,
	}, failures, syncErr)
}

// renderPod returns the entry of one pod under parent, or a failure naming
// the field; nodeName is the pod's node when a Node of that name exists.
func (p *policy) renderPod(v *podView, nodeName string, parent spiffeid.ID) (*entries.Entry, *v1alpha1.Failure) {
	fail := func(reason, field string, err error) (*entries.Entry, *v1alpha1.Failure) {
		return nil, &v1alpha1.Failure{Object: v.String(), Reason: reason, Message: fmt.Sprintf("%s: %v", field, err)}
	}
	vals := template.Values{Namespace: v.namespace, ServiceAccount: v.serviceAccount, Labels: v.labels, Annotations: v.annotations,
		PodName: v.name, OwnerKind: v.ownerKind, OwnerName: v.ownerName, NodeName: nodeName,
		ClusterName: p.clusterName, TrustDomain: p.trustDomain.Name()}
	e, reason, field, err := p.renderTemplates(vals, parent, v.namespace, v.serviceAccount)
	if err != nil {
		return fail(reason, field, err)
	}
	e.Selectors = append(e.Selectors, entries.Selector{Type: "k8s", Value: "pod-uid:" + v.uid})
	e.Normalize()
	return &e, nil
}
