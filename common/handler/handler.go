// Package handler defines the interface an operator implements: the business
// logic of one kind, free of the reconcile lifecycle that the common
// Controller runs around it.
package handler

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/object"
)

// Handler holds the business logic of one kind. It sets status (and any
// conditions of its own) on obj; the Controller persists them and owns the
// Processing and Ready conditions.
//
// Return nil when the object is in its desired state, a ctrlerrors Blocked
// error when an outside dependency is missing, a Retryable error for a quick
// retry, or any other error for a rate-limited retry.
type Handler[T object.Object] interface {
	// CreateOrUpdate drives the world towards obj's spec.
	CreateOrUpdate(ctx context.Context, obj T) error
	// Delete removes what CreateOrUpdate made. The finalizer is removed only
	// after it returns nil.
	Delete(ctx context.Context, obj T) error
}

// Owner is implemented by a handler whose object has children: after
// Delete returns nil, the Controller deletes every owned child of these
// types and removes the finalizer only once none is left (for Live types,
// confirmed by an uncached read). During a pass, the handler declares the
// types whose desired set it knows (janitor.Client.Declare); after a
// successful pass the Controller deletes the declared children the pass did
// not write. A handler never calls Cleanup itself.
type Owner interface {
	OwnedTypes() []janitor.ChildType
}

// Forgetter is implemented by a handler that remembers something of an
// object between its passes (say, what the last pass met). Once the
// object is gone from the cache the Controller calls Forget with its key,
// whether or not Delete ran (a finalizer removed by hand skips Delete), so
// that memory does not outlive the object. A handler that keys its memory
// by UID should keep the object's key beside it.
type Forgetter interface {
	Forget(key types.NamespacedName)
}
