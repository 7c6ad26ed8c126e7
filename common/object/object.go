// Package object defines the interface a Kubernetes kind implements to be
// reconciled by the common Controller: a client.Object that exposes its
// status conditions.
package object

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object is a Kubernetes object with a conditions list in its status.
type Object interface {
	client.Object
	// GetConditions returns the status conditions.
	GetConditions() []metav1.Condition
	// SetCondition adds or replaces the condition of the same type. It keeps
	// LastTransitionTime when the status did not change (meta.SetStatusCondition).
	SetCondition(metav1.Condition)
}

// ObservedGenerationSetter is implemented by kinds whose status carries an
// observedGeneration field; the Controller stamps it after each pass.
type ObservedGenerationSetter interface {
	SetObservedGeneration(int64)
}

// List is a list kind that exposes its items.
type List[T Object] interface {
	client.ObjectList
	// GetItems returns pointers to the items of the list.
	GetItems() []T
}
