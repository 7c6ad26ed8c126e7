//go:build tools

// Package tools pins the Kubernetes binaries that the Trustplane test harness
// builds: the control plane's kube-apiserver and kubectl, and the real node's
// kubelet, kube-controller-manager and kube-scheduler.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
