// Package chaos runs the three operators, two replicas each with leader
// election, on the local cluster (e2e/framework) while a seeded churn
// generator changes what they manage and a seeded schedule kills, pauses
// and restarts their leaders, spire-server and the kube-apiserver. It
// checks the system's invariants throughout and at quiescence and reports
// faults, checks, violations, the worst identity gap and the time to
// quiescence as a table. Run drives one such run; the package's test runs
// a short one with a fixed seed, e2e/cmd/chaos a long one.
package chaos
