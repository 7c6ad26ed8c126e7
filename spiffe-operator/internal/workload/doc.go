// Package workload reads the workloads a SpiffeRegistration can select
// (Deployments, StatefulSets, DaemonSets) from the informer cache, and trims
// what the cache keeps of them: only metadata, the pod selector and the
// service account survive the cache transform, so no pod template is ever
// held in memory.
package workload
