// Package labels holds the label, annotation and finalizer names that every
// Trustplane operator agrees on (see docs/architecture.md).
package labels

const (
	// Environment is the label that scopes an object to one environment.
	// The Controller refuses to reconcile an object without it unless a
	// default environment is configured.
	Environment = "trustplane.dev/environment"

	// OwnerUID, OwnerKind, OwnerName and OwnerNamespace mark a child that
	// cannot carry an owner reference (a cross-namespace or cluster-scoped
	// child of a namespaced owner). JanitorClient recognises children by them.
	OwnerUID = "trustplane.dev/owner-uid"
	// OwnerKind is the kind of the owner of a cross-scope child.
	OwnerKind = "trustplane.dev/owner-kind"
	// OwnerName is the name of the owner of a cross-scope child.
	OwnerName = "trustplane.dev/owner-name"
	// OwnerNamespace is the namespace of the owner of a cross-scope child
	// (empty for cluster-scoped owners).
	OwnerNamespace = "trustplane.dev/owner-namespace"

	// Finalizer is the finalizer the Controller puts on every object it
	// reconciles, so that Handler.Delete runs before the object goes.
	Finalizer = "trustplane.dev/finalizer"
)
