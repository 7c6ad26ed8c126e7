package janitor_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func toUnstructured(m map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: m}
}

// unknownList is a list kind no scheme knows.
type unknownList struct {
	metav1.TypeMeta
	metav1.ListMeta
}

func (u *unknownList) DeepCopyObject() runtime.Object { c := *u; return &c }
