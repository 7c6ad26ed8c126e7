// Package status holds Common, the conditions and observed generation that
// the status of every kind reconciled by the common Controller embeds. It
// imports only apimachinery, so that API packages embedding it pull in
// nothing else.
package status

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Common is the part of the status every reconciled kind shares. Embed it
// inline at the top of the kind's status:
//
//	type WidgetStatus struct {
//		status.Common `json:",inline"`
//		// ... the kind's own fields
//	}
//
// and return it from the kind's CommonStatus method.
//
// +kubebuilder:object:generate=true
type Common struct {
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
func (s *Common) GetConditions() []metav1.Condition { return s.Conditions }

// SetCondition adds or replaces the condition of the same type, keeping its
// LastTransitionTime when the status did not change. condition.Set also
// stamps the object's generation; prefer it in handlers.
func (s *Common) SetCondition(c metav1.Condition) { meta.SetStatusCondition(&s.Conditions, c) }

// RemoveCondition removes the condition of type t.
func (s *Common) RemoveCondition(t string) { meta.RemoveStatusCondition(&s.Conditions, t) }

// SetObservedGeneration records the generation the status describes.
func (s *Common) SetObservedGeneration(g int64) { s.ObservedGeneration = g }
