// Package controller wires the IdentityBinding handler into the common
// Controller and a controller-runtime manager: the cache indexes, and the
// watches that requeue exactly the bindings an event can affect (group
// peers on a binding change, referencing bindings on a pool change, owners
// and waiting peers on an output change).
package controller
