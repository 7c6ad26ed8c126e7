// Package testenv starts real components for tests: a kube-apiserver with
// etcd (through envtest, with the binaries hack/build-tools.sh builds from
// the Go module proxy) and a real spire-server, optionally with a
// spire-agent. Every process it starts is stopped by Stop (SIGTERM, then
// SIGKILL after a timeout), and its logs stay in a temporary directory so a
// failing test can print them.
package testenv
