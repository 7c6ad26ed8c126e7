// Package spiffeentry holds the business logic of SpiffeEntry: validate the
// explicit entry, hand it to the entry syncer, and report its SPIRE entry ID,
// or the object or entry that masks it, in the status.
package spiffeentry
