package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/trustplane/trustplane/common/status"
)

// GroupVersion is the group and version of Widget.
var GroupVersion = schema.GroupVersion{Group: "test.trustplane.dev", Version: "v1"}

// SchemeBuilder registers Widget with a scheme.
var SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme adds Widget to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme

// WidgetSpec is the desired state of a Widget: ConfigMap children to create.
type WidgetSpec struct {
	// Children are the names of ConfigMaps to create in the Widget's namespace.
	// +optional
	Children []string `json:"children,omitempty"`
	// Data is copied into every child.
	// +optional
	Data map[string]string `json:"data,omitempty"`
	// Fail makes the test handler return an error of this kind: "blocked",
	// "retryable", "delay", "terminal" or "late" (after writing the children).
	// +optional
	Fail string `json:"fail,omitempty"`
}

// WidgetStatus is the observed state of a Widget.
type WidgetStatus struct {
	status.Common `json:",inline"`
	// ChildCount is the number of children the last pass ensured.
	// +optional
	ChildCount int `json:"childCount,omitempty"`
}

// Widget is the test kind of the common framework.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WidgetSpec   `json:"spec,omitempty"`
	Status WidgetStatus `json:"status,omitempty"`
}

// CommonStatus implements object.Object.
func (w *Widget) CommonStatus() *status.Common { return &w.Status.Common }

// WidgetList is a list of Widgets.
//
// +kubebuilder:object:root=true
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// GetItems implements object.List.
func (l *WidgetList) GetItems() []*Widget {
	out := make([]*Widget, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func init() {
	SchemeBuilder.Register(&Widget{}, &WidgetList{})
}
