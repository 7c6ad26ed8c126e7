package janitor_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// unknownList is a list kind no scheme knows.
type unknownList struct {
	metav1.TypeMeta
	metav1.ListMeta
}

func (u *unknownList) DeepCopyObject() runtime.Object { c := *u; return &c }
