//go:build tools

// Package tools pins the prometheus-operator API types from which
// hack/servicemonitor-crd.sh generates the ServiceMonitor CRD that the chart
// tests apply.
package tools

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
