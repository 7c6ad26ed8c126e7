// Package spire reads trust bundles from a SPIRE Server through its Bundle
// API (spire-api-sdk bundle/v1) over gRPC: the server's own bundle with
// GetBundle and federated bundles with ListFederatedBundles. It is the only
// package of the operator that talks to SPIRE.
//
// The connection is either the server's admin Unix socket (the operator runs
// next to the server) or mTLS to the server's TCP address with an
// X509-SVID taken from a SPIRE agent's Workload API through go-spiffe's
// X509Source, which also keeps the SVID rotated.
package spire
