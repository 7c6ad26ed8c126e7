// Package testsupport serves the tests and the benchmark: it counts the
// controller's reconciles (Reconciles) and finds the CRDs
// of other projects (InferencePool, ClusterSPIFFEID) in the Go module cache
// at pinned versions, downloading them with `go mod download` when needed,
// so they are never copied into this repository.
package testsupport
