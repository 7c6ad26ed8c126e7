package pool

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// InferencePoolGVK returns the InferencePool version the operator reads (a
// function, so no caller can change it for everyone).
func InferencePoolGVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: v1alpha1.InferencePoolGroup, Version: "v1", Kind: v1alpha1.InferencePoolKind}
}

// RefError is a pool reference that cannot be resolved, with the InvalidRef
// reason to report.
type RefError struct {
	// Reason is TargetPoolNotFound, InferencePoolCRDMissing or
	// UnsupportedPoolKind.
	Reason string
	err    error
}

// Error implements error.
func (e *RefError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e *RefError) Unwrap() error { return e.err }

// Resolver reads pools.
type Resolver struct {
	// Reader reads pools; the manager's cached client in production.
	Reader client.Reader
}

// Selector returns the pool's selector labels. Errors are a *RefError, a
// *selector.Error (InvalidPoolSelector) or a transient read error.
func (r Resolver) Selector(ctx context.Context, namespace string, ref v1alpha1.PoolReference) (map[string]string, error) {
	ref = ref.Resolved()
	key := client.ObjectKey{Namespace: namespace, Name: ref.Name}
	switch {
	case ref.Group == v1alpha1.InferencePoolGroup && ref.Kind == v1alpha1.InferencePoolKind:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(InferencePoolGVK())
		if err := r.Reader.Get(ctx, key, u); err != nil {
			return nil, readError(ref, namespace, err)
		}
		return InferencePoolSelector(u)
	case ref.Group == v1alpha1.AppsGroup && ref.Kind == v1alpha1.DeploymentKind:
		d := &appsv1.Deployment{}
		if err := r.Reader.Get(ctx, key, d); err != nil {
			return nil, readError(ref, namespace, err)
		}
		return LabelSelectorLabels(d.Spec.Selector)
	case ref.Group == v1alpha1.AppsGroup && ref.Kind == v1alpha1.StatefulSetKind:
		s := &appsv1.StatefulSet{}
		if err := r.Reader.Get(ctx, key, s); err != nil {
			return nil, readError(ref, namespace, err)
		}
		return LabelSelectorLabels(s.Spec.Selector)
	default:
		return nil, &RefError{Reason: v1alpha1.ReasonUnsupportedPoolKind,
			err: fmt.Errorf("poolRef kind %s in group %q is not supported: use InferencePool (%s), Deployment or StatefulSet (apps)",
				ref.Kind, ref.Group, v1alpha1.InferencePoolGroup)}
	}
}

// StripPodTemplate is a cache transform for Deployments and StatefulSets:
// pool lookups read only metadata and spec.selector, so the pod template,
// the status and the managed fields are dropped before the object enters
// the cache. Other objects pass unchanged.
func StripPodTemplate(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.Spec.Template = corev1.PodTemplateSpec{}
		o.Status = appsv1.DeploymentStatus{}
		o.SetManagedFields(nil)
	case *appsv1.StatefulSet:
		o.Spec.Template = corev1.PodTemplateSpec{}
		o.Spec.VolumeClaimTemplates = nil
		o.Status = appsv1.StatefulSetStatus{}
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// InferencePoolSelector returns the selector labels of an InferencePool read
// as unstructured (spec.selector, in any of the shapes the decoder accepts).
func InferencePoolSelector(u *unstructured.Unstructured) (map[string]string, error) {
	raw, _, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "selector")
	if err != nil {
		return nil, fmt.Errorf("read selector of InferencePool %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return selector.DecodePoolSelector(raw)
}

// LabelSelectorLabels feeds the typed selector of a Deployment or
// StatefulSet through the same decoder as an unstructured one.
func LabelSelectorLabels(sel *metav1.LabelSelector) (map[string]string, error) {
	if sel == nil {
		return selector.DecodePoolSelector(nil)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sel)
	if err != nil {
		return nil, fmt.Errorf("convert pool selector: %w", err)
	}
	return selector.DecodePoolSelector(m)
}

func readError(ref v1alpha1.PoolReference, namespace string, err error) error {
	switch {
	case meta.IsNoMatchError(err):
		return &RefError{Reason: v1alpha1.ReasonInferencePoolCRDMissing,
			err: fmt.Errorf("the %s CRD (%s) is not installed: %w", ref.Kind, InferencePoolGVK().GroupVersion(), err)}
	case apierrors.IsNotFound(err):
		return &RefError{Reason: v1alpha1.ReasonTargetPoolNotFound,
			err: fmt.Errorf("%s %s/%s not found", ref.Kind, namespace, ref.Name)}
	}
	return fmt.Errorf("get %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
}
