// Package entrysync keeps SPIRE's entries in line with what the operator's
// objects want, with as few SPIRE calls as it can.
//
// A Syncer holds the operator's in-memory view of its own entries, per parent
// ID (view.go). It reads SPIRE (ListEntries filtered by parent ID, paged) only
// when a parent was never read, after a failed write, or when the view is
// older than the resync interval; every other pass diffs against the view
// and sends only the writes needed, batched.
//
// Ownership (claims.go): entries the operator creates carry an ID made of a
// prefix, the owner's UID tag and the key hash, parsed strictly; it never
// updates or deletes any other entry. When two objects want the same entry
// (same parent, SPIFFE ID and selectors) the oldest object wins and the
// others report it masked; when the winner lets go, the next one is notified
// and takes over. An entry held by another of our objects is taken over only
// when that object is known to this process and younger (or no longer wants
// it), so a restart never moves a shared entry. A foreign entry that masks
// ours is checked on a backing-off timer (recheck.go).
//
// Writes go in make-before-break order: creates before the deletes of
// entries that are no longer wanted, so a change of SPIFFE ID or selectors
// never leaves a workload without an entry. An entry no longer wanted stays
// while a running pod that needed it when it stopped being wanted still
// does (retention.go).
package entrysync
