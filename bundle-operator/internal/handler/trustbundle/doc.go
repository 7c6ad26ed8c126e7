// Package trustbundle holds the business logic of TrustBundle, read top to
// bottom in Handler.CreateOrUpdate: resolve and validate the sources, merge
// them, drop expired CAs and retain removed ones for the grace period,
// render the formats, record the bundle in the status, and sync every
// target. A source that breaks a rule stops the pass before any write, so
// targets keep their last good bundle.
package trustbundle
