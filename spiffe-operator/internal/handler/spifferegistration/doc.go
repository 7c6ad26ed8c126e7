// Package spifferegistration holds the business logic of the
// SpiffeRegistration policy: compile and validate the spec (spec.go), select
// workloads from the informer cache and render one entry per distinct
// (SPIFFE ID, parent ID, selector set) (render.go), hand the desired set to
// the entry syncer and report counts and failures in the status (handler.go).
package spifferegistration
