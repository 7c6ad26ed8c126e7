// Package object defines what a Kubernetes kind implements to be reconciled
// by the common Controller: a client.Object whose status embeds
// status.Common, the conditions and observed generation every Trustplane
// kind carries.
package object

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/status"
)

// Object is a Kubernetes object whose status embeds status.Common.
type Object interface {
	client.Object
	// CommonStatus returns the status.Common embedded in the object's
	// status, so the Controller and condition.Set can read and write it in
	// place.
	CommonStatus() *status.Common
}

// StatusInPlace returns an error unless o's CommonStatus points into o
// itself. A CommonStatus on a value receiver compiles, but returns a copy
// at every call, so conditions written to it never reach the object.
func StatusInPlace(o Object) error {
	if o.CommonStatus() != o.CommonStatus() {
		return fmt.Errorf("%T.CommonStatus returns a copy of the status (a method on a value receiver?): conditions written to it never reach the object; declare it on the pointer", o)
	}
	return nil
}

// List is a list kind that exposes its items.
type List[T Object] interface {
	client.ObjectList
	// GetItems returns pointers to the items of the list.
	GetItems() []T
}
