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

// Transform is a cache transform (cache.TransformFunc) that keeps of a pod
// only its name, namespace, UID, resourceVersion, labels, owner references,
// deletion timestamp, service account, node name and phase.
func Transform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{ServiceAccountName: serviceAccount(p), NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}, nil
}

// serviceAccount returns the pod's service account; the API server sets
// "default" when the pod names none, and so does this.
func serviceAccount(p *corev1.Pod) string {
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

// Lister returns an entrysync.PodLister reading r, a cache with
// ServiceAccountIndex: the UIDs and labels of the running pods of one
// service account in one namespace.
func Lister(r client.Reader) entrysync.PodLister {
	return func(ctx context.Context, namespace, serviceAccount string) ([]entrysync.Pod, error) {
		var l corev1.PodList
		if err := r.List(ctx, &l, client.InNamespace(namespace), client.MatchingFields{ServiceAccountIndex: serviceAccount},
			client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list pods of service account %s/%s: %w", namespace, serviceAccount, err)
		}
		out := make([]entrysync.Pod, 0, len(l.Items))
		for i := range l.Items {
			if p := &l.Items[i]; Running(p) {
				out = append(out, entrysync.Pod{UID: string(p.UID), Labels: p.Labels})
			}
		}
		return out, nil
	}
}
