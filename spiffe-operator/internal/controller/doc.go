// Package controller wires the two kinds of spiffe-operator into a manager:
// each is a common Controller around its handler. It adds the watches that
// make passes event-driven (workloads and namespaces for policies, and the
// in-process notifications the entry syncer sends when an owner wins or
// loses a shared entry) and the cache options that keep only what the
// handlers need.
package controller
