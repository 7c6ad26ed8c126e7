// Package object defines what a Kubernetes kind implements to be reconciled
// by the common Controller: a client.Object whose status embeds
// status.Common, the conditions and observed generation every Trustplane
// kind carries.
package object

import (
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

// List is a list kind that exposes its items.
type List[T Object] interface {
	client.ObjectList
	// GetItems returns pointers to the items of the list.
	GetItems() []T
}
