// Package bench measures spiffe-operator against a real kube-apiserver and
// spire-server, running the operator as its own process: convergence of N
// Deployments from nothing against the raw batched-create floor, the latency
// of one new Deployment to its entry, the latency of one changed Deployment
// (new service account) to its entry replaced, SPIRE calls and API writes
// while idle, and the operator's RSS. Run it with `make bench`; the figures are printed
// and written to $BENCH_OUT.
package bench
