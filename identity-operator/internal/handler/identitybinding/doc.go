// Package identitybinding holds the business logic of IdentityBinding: it
// renders a safe selector set and SPIFFE ID, settles conflicts with peers,
// and keeps exactly one set of outputs per Ready binding. The common
// Controller runs the lifecycle around it.
//
// The files are named after the rule they hold: handler.go (the pass, top
// to bottom), conflict.go (peers and withdrawal), ownership.go (writing
// outputs without touching foreign objects), conditions.go (the one failure
// condition at a time).
package identitybinding
