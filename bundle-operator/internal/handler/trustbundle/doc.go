// Package trustbundle holds the business logic of TrustBundle, read top to
// bottom in Handler.CreateOrUpdate: resolve and validate the sources, merge
// them, drop expired CAs and retain removed ones for the grace period,
// render the formats, record the bundle in the status, and sync every
// target. A source that breaks a rule stops the pass before any change to
// an existing target, so targets keep their last good bundle; targets that
// do not exist yet are created with that same bundle, rebuilt from the
// status (lastgood.go), so that new namespaces are not left without a trust
// bundle while a source is bad or SPIRE is down.
package trustbundle
