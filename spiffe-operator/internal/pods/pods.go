package pods

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// ServiceAccountIndex is the cache index of pods by service account.
const ServiceAccountIndex = "spec.serviceAccountName"

// MirrorAnnotation marks a mirror pod: the API server's copy of a static
// pod, created by the kubelet of the node that runs it.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// lastApplied is kubectl's copy of an applied object, often the largest
// annotation, which no template needs.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Transform is a cache transform (cache.TransformFunc) that keeps of a pod
// only its name, namespace, UID, resourceVersion, labels, annotations (for
// pod templates; not kubectl's last-applied configuration), owner
// references, deletion timestamp, service account, node name and phase.
func Transform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	var annotations map[string]string
	for k, v := range p.Annotations {
		if k == lastApplied {
			continue
		}
		if annotations == nil {
			annotations = make(map[string]string, len(p.Annotations))
		}
		annotations[k] = v
	}
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
			Annotations: annotations,
		},
		Spec:   corev1.PodSpec{ServiceAccountName: serviceAccount(p), NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}, nil
}

// serviceAccount returns the pod's service account; the API server sets
// "default" when the pod names none, and so does this. A mirror pod has
// none: the API server neither sets one nor lets it name one, and the
// kubelet runs it without, so it runs as no service account (""), and no
// entry of the operator, which always names one, matches it. Any kubelet
// may create mirror pods in any namespace; counting them as "default"
// would let a node attract the entries of its namespace's default account.
func serviceAccount(p *corev1.Pod) string {
	if Mirror(p) {
		return ""
	}
	if p.Spec.ServiceAccountName == "" {
		return "default"
	}
	return p.Spec.ServiceAccountName
}

// IndexServiceAccount is the indexer of ServiceAccountIndex.
func IndexServiceAccount(obj client.Object) []string {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	return []string{serviceAccount(p)}
}

// Running reports whether a pod may still run, and so need its identity:
// it has not reached Succeeded or Failed. A terminating pod still runs.
func Running(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// RunningPod is a running pod, as RunningPods reports it.
type RunningPod struct {
	// UID is the pod's UID.
	UID string
	// Node is the pod's spec.nodeName; empty while it is not scheduled.
	Node string
	// Labels are the pod's labels.
	Labels map[string]string
}

// RunningPods returns the running pods of one service account in one
// namespace, scheduled or not, reading r, a cache with
// ServiceAccountIndex. Mirror pods (which run as no service account) are
// left out.
func RunningPods(ctx context.Context, r client.Reader, namespace, account string) ([]RunningPod, error) {
	if account == "" {
		return nil, nil
	}
	var l corev1.PodList
	if err := r.List(ctx, &l, client.InNamespace(namespace), client.MatchingFields{ServiceAccountIndex: account},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods of service account %s/%s: %w", namespace, account, err)
	}
	out := make([]RunningPod, 0, len(l.Items))
	for i := range l.Items {
		p := &l.Items[i]
		if Running(p) && serviceAccount(p) == account {
			out = append(out, RunningPod{UID: string(p.UID), Node: p.Spec.NodeName, Labels: p.Labels})
		}
	}
	return out, nil
}

// InNamespace returns the running pods of namespace, mirror pods excepted,
// reading r (the cache) without copying them; fn must not keep or modify
// them.
func InNamespace(ctx context.Context, r client.Reader, namespace string, fn func(*corev1.Pod)) error {
	var l corev1.PodList
	if err := r.List(ctx, &l, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list pods of namespace %s: %w", namespace, err)
	}
	for i := range l.Items {
		if p := &l.Items[i]; Running(p) && !Mirror(p) {
			fn(p)
		}
	}
	return nil
}

// Mirror reports whether p is a mirror pod.
func Mirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[MirrorAnnotation]
	return ok
}

// Owner returns the kind and name of p's controller (or, without one, of
// its first owner); empty for a bare pod.
func Owner(p *corev1.Pod) (kind, name string) {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return o.Kind, o.Name
		}
	}
	if len(p.OwnerReferences) > 0 {
		return p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name
	}
	return "", ""
}

// Lister returns an entrysync.PodLister reading r, a cache with
// ServiceAccountIndex: the UIDs and labels of RunningPods.
func Lister(r client.Reader) entrysync.PodLister {
	return func(ctx context.Context, namespace, serviceAccount string) ([]entrysync.Pod, error) {
		running, err := RunningPods(ctx, r, namespace, serviceAccount)
		if err != nil {
			return nil, err
		}
		out := make([]entrysync.Pod, len(running))
		for i, p := range running {
			out[i] = entrysync.Pod{UID: p.UID, Labels: p.Labels}
		}
		return out, nil
	}
}
