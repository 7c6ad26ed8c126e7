// Package trigger requeues TrustBundles for changes that no Kubernetes watch
// reports: a new SPIRE bundle (CA rotation), an edit of a ConfigMap or
// Secret source (those are read live, never cached, so nothing watches
// them), and the moment a retained CA's grace period ends or a CA expires.
//
// It polls. SPIRE's Bundle API gives every bundle a sequence number that
// grows on each change, so one cheap GetBundle (and ListFederatedBundles
// when federated bundles are used) per interval detects a rotation exactly.
// The Workload API could push bundles instead, but only to a process with
// an agent and a registration entry, and only for the agent's trust domain
// and the federations of that entry; the operator may run with just the
// admin socket, so polling works in every deployment.
package trigger
