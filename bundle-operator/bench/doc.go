// Package bench measures the operator against a real kube-apiserver and
// spire-server: fan-out of one TrustBundle to 1,000 namespaces, writes on an
// unchanged resync and after a restart, a SPIRE CA rotation reaching every
// target, and the operator's memory. `make bench` runs it with
// `go test -run '^$' -bench . -benchtime 1x ./bench/`.
package bench
