// Package bench measures the identity-operator at scale against a real API
// server: 1,000 IdentityBindings in one namespace over 10 service accounts.
// It reports the time until all are Ready, the API calls per reconcile, and
// the cost of the indexed conflict lookup beside the all-pairs scan of the
// reference design, in the same run. `make bench` runs it with
// `go test -run '^$' -bench . -benchtime 1x ./bench/`; set BENCH_OUT to
// also write the figures to a file.
package bench
