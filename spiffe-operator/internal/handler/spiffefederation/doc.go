// Package spiffefederation holds the business logic of SpiffeFederation:
// validate the federation relationship, and create, update and delete it
// in SPIRE through the TrustDomain API, never touching a relationship the
// object did not record as its own (status.relationshipTrustDomain).
package spiffefederation
