// Package entries models a SPIRE registration entry as the operator wants
// it: its identity (SPIFFE ID, parent ID and selector set, the Key), the
// options it can change in place, the entry IDs that mark the entries this
// operator owns, and the field-by-field comparison that yields the update
// mask for BatchUpdateEntry.
package entries
