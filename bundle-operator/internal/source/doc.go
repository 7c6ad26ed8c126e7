// Package source reads the sources of a TrustBundle (the SPIRE Bundle API,
// ConfigMaps, Secrets, inline PEM and the public root set) and validates
// each one on its own with package bundle; the trust domains read from
// SPIRE are validated and returned each on its own, never merged. A source
// that breaks a rule fails the whole resolution with an *Error naming the
// source and the reason, so that the caller uses nothing of any source:
// every target keeps its last good bundle, and targets that do not exist
// yet get that same bundle.
//
// ConfigMaps and Secrets are read only from the allowed namespaces, and
// live through an uncached reader: caching their data would cost memory
// for every ConfigMap of the cluster. Changes to them are noticed by
// package trigger, which compares their resourceVersions (ConfigMaps' from
// the metadata cache).
package source
