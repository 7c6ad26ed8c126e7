// Package output builds the objects the operator writes for a Ready
// IdentityBinding: a SpiffeEntry (registered in SPIRE by spiffe-operator)
// and, when configured, a spire-controller-manager ClusterSPIFFEID. Both are
// cluster-scoped children of a namespaced binding, so they carry owner
// labels instead of an owner reference, and a deterministic name derived
// from the binding's namespace and name.
package output
