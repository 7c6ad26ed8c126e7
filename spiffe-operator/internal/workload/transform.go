package workload

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: t.Spec.ServiceAccountName}}
}

// Transform is a cache transform (cache.TransformFunc) that drops all but
// the metadata, selector and service account of workloads, and all but the
// metadata of namespaces. Other objects pass unchanged.
func Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &appsv1.Deployment{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta),
			Spec: appsv1.DeploymentSpec{Selector: o.Spec.Selector, Template: slimTemplate(o.Spec.Template)}}, nil
	case *appsv1.StatefulSet:
		return &appsv1.StatefulSet{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta),
			Spec: appsv1.StatefulSetSpec{Selector: o.Spec.Selector, Template: slimTemplate(o.Spec.Template)}}, nil
	case *appsv1.DaemonSet:
		return &appsv1.DaemonSet{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta),
			Spec: appsv1.DaemonSetSpec{Selector: o.Spec.Selector, Template: slimTemplate(o.Spec.Template)}}, nil
	case *corev1.Namespace:
		return &corev1.Namespace{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta)}, nil
	}
	return obj, nil
}
