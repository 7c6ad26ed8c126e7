// Package common is the root of Trustplane's Handler-pattern operator framework.
//
// The framework lives in sub-packages, each with one purpose:
//
//   - object: the Object interface every reconciled kind implements.
//   - handler: the Handler interface an operator implements.
//   - condition: the Processing and Ready conditions.
//   - ctrlerrors: Blocked, Retryable and RetryableWithDelay errors.
//   - config: viper-backed configuration, passed in rather than read from globals.
//   - manager: process settings of the controller-runtime manager (metrics,
//     probes, leader election, client rate limits, GC target).
//   - spireconn: the connection to a SPIRE server (admin socket or mTLS).
//   - scoped: an environment-scoped client.
//   - janitor: a client that deletes owned children a reconcile did not touch.
//   - controller: the generic Controller that runs the reconcile lifecycle.
//   - ownpolicy: the admission policy that holds an operator's service
//     account to the Controller's writes on its own kinds (cmd/ownpolicy
//     renders it from the operator's CRDs).
//   - testenv: a test harness with a real kube-apiserver, etcd and spire-server.
package common
