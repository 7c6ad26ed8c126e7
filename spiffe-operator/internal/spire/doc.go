// Package spire is the operator's only door to the SPIRE server's Entry API
// (the connection itself comes from common/spireconn: admin Unix socket, or
// mTLS over TCP with the operator's own X509-SVID). It wraps the Entry API so that reads are filtered by parent
// ID and paged, writes are batched under SPIRE's and gRPC's limits, and
// every RPC is counted and timed by method and code.
package spire
