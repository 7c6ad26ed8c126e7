// Package testpki makes throw-away CA certificates and keys for tests and
// benchmarks. It is never used by the operator itself.
package testpki
