// Package object defines what a Kubernetes kind implements to be reconciled
// by the common Controller: a client.Object whose status embeds Status, the
// conditions and observed generation every Trustplane kind carries.
package object

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object is a Kubernetes object whose status embeds Status.
type Object interface {
	client.Object
	// CommonStatus returns the Status embedded in the object's status, so
	// the Controller and condition.Set can read and write it in place.
	CommonStatus() *Status
}

// Status is the part of the status every reconciled kind shares. Embed it
// inline at the top of the kind's status:
//
//	type WidgetStatus struct {
//		object.Status `json:",inline"`
//		// ... the kind's own fields
//	}
//
// and return it from the kind's CommonStatus method.
//
// +kubebuilder:object:generate=true
type Status struct {
	// Conditions: Processing and Ready, set by the controller, and the
	// conditions of the kind's handler (see the kind's documentation).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GetConditions returns the conditions.
func (s *Status) GetConditions() []metav1.Condition { return s.Conditions }

// SetCondition adds or replaces the condition of the same type, keeping its
// LastTransitionTime when the status did not change. condition.Set also
// stamps the object's generation; prefer it in handlers.
func (s *Status) SetCondition(c metav1.Condition) { meta.SetStatusCondition(&s.Conditions, c) }

// RemoveCondition removes the condition of type t.
func (s *Status) RemoveCondition(t string) { meta.RemoveStatusCondition(&s.Conditions, t) }

// SetObservedGeneration records the generation the status describes.
func (s *Status) SetObservedGeneration(g int64) { s.ObservedGeneration = g }

// List is a list kind that exposes its items.
type List[T Object] interface {
	client.ObjectList
	// GetItems returns pointers to the items of the list.
	GetItems() []T
}
