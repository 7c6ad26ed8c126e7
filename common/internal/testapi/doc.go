// Package testapi starts the control plane of the framework's own tests: a
// real kube-apiserver that serves the example's Widget kind.
package testapi
