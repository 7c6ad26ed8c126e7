package workload

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/labelset"
)

// Object is what the cache keeps of a Deployment, StatefulSet or DaemonSet
// (see Transform): the metadata selection reads, its labels (as a compact
// LabelSet; ObjectMeta.Labels stays nil), the pod template's service
// account and the selector's labels. It is a fraction of the typed
// object's size, which at 10,000 workloads is most of the operator's
// memory.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// LabelSet holds the workload's labels.
	LabelSet labelset.Set
	// WorkloadKind is Deployment, StatefulSet or DaemonSet.
	WorkloadKind v1alpha1.WorkloadKind
	// ServiceAccount is the pod template's spec.serviceAccountName, as set.
	ServiceAccount string
	// MatchLabels is spec.selector.matchLabels; it shares LabelSet's storage
	// when both hold the same labels, as they usually do.
	MatchLabels labelset.Set
	// HasMatchExpressions is true when spec.selector uses expressions.
	HasMatchExpressions bool
}

var _ client.Object = &Object{}

// DeepCopyObject implements runtime.Object (label sets are never changed,
// so the copy shares them).
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// GetLabels implements metav1.Object: a new map of LabelSet.
func (o *Object) GetLabels() map[string]string { return o.LabelSet.Map() }

// SetLabels implements metav1.Object.
func (o *Object) SetLabels(l map[string]string) { o.LabelSet = labelset.FromMap(l) }

// slimMeta keeps the metadata the operator and the cache need.
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            m.Labels,
	}
}

// compact returns the Object of a workload.
func compact(tm metav1.TypeMeta, m metav1.ObjectMeta, kind v1alpha1.WorkloadKind, sel *metav1.LabelSelector, sa string) *Object {
	o := &Object{TypeMeta: tm, ObjectMeta: slimMeta(m), LabelSet: labelset.FromMap(m.Labels), WorkloadKind: kind, ServiceAccount: sa}
	o.Labels = nil
	if sel != nil {
		o.MatchLabels = o.LabelSet
		if !maps.Equal(sel.MatchLabels, m.Labels) {
			o.MatchLabels = labelset.FromMap(sel.MatchLabels)
		}
		o.HasMatchExpressions = len(sel.MatchExpressions) > 0
	}
	return o
}

// Transform is a cache transform (cache.TransformFunc) that keeps of a
// workload only its Object, and of a namespace only its metadata. Other
// objects pass unchanged. The cache then holds *Object for the workload
// kinds: read them through Lister and Getter (or FromObject), not through
// a typed client.Reader.
func Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return compact(o.TypeMeta, o.ObjectMeta, v1alpha1.WorkloadKindDeployment, o.Spec.Selector, o.Spec.Template.Spec.ServiceAccountName), nil
	case *appsv1.StatefulSet:
		return compact(o.TypeMeta, o.ObjectMeta, v1alpha1.WorkloadKindStatefulSet, o.Spec.Selector, o.Spec.Template.Spec.ServiceAccountName), nil
	case *appsv1.DaemonSet:
		return compact(o.TypeMeta, o.ObjectMeta, v1alpha1.WorkloadKindDaemonSet, o.Spec.Selector, o.Spec.Template.Spec.ServiceAccountName), nil
	case *corev1.Namespace:
		return &corev1.Namespace{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta)}, nil
	}
	return obj, nil
}
