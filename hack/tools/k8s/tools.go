//go:build tools

// Package tools pins the Kubernetes binaries that the Trustplane test harness builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
