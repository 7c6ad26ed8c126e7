// Package source reads the sources of a TrustBundle (the SPIRE Bundle API,
// ConfigMaps, Secrets and inline PEM) and validates each one on its own
// with package bundle. A source that breaks a rule fails the whole
// resolution with an *Error naming the source and the reason, so that the
// caller uses nothing of any source: every target keeps its last good
// bundle, and targets that do not exist yet get that same bundle.
//
// ConfigMaps and Secrets are read live through an uncached reader: caching
// them would cost memory for every ConfigMap of the cluster. Changes to them
// are noticed by package trigger, which compares their resourceVersions.
package source
