// Package services keeps of Services what autoPopulateDNSNames reads (name,
// namespace, selector) and finds the Services that select a set of pod
// labels.
package services

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/internal/labelset"
)

// Transform is a cache transform (cache.TransformFunc) that keeps of a
// Service only its name, namespace, UID, resourceVersion, deletion
// timestamp and selector.
func Transform(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			DeletionTimestamp: s.DeletionTimestamp},
		Spec: corev1.ServiceSpec{Selector: s.Spec.Selector},
	}, nil
}

// DNSNames returns, sorted, <service>.<namespace>.svc for every Service of
// namespace whose selector is not empty and selects pods carrying
// podLabels (every key and value of the selector is among them), reading r
// (the cache). A Service without a selector selects no pods by itself and
// counts for none.
func DNSNames(ctx context.Context, r client.Reader, namespace string, podLabels map[string]string) ([]string, error) {
	var l corev1.ServiceList
	if err := r.List(ctx, &l, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list services of namespace %s: %w", namespace, err)
	}
	var out []string
	for i := range l.Items {
		s := &l.Items[i]
		if len(s.Spec.Selector) == 0 || s.DeletionTimestamp != nil || !labelset.MapSubset(s.Spec.Selector, podLabels) {
			continue
		}
		out = append(out, s.Name+"."+s.Namespace+".svc")
	}
	slices.Sort(out)
	return out, nil
}
