// Package pods keeps the operator's view of the pods that run: a cache
// trimmed to what decides which entries a pod matches (namespace, service
// account, labels, node name, owner references, phase), indexed by service
// account, so an entry no longer wanted stays while a pod still needs it.
package pods
