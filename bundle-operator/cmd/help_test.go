package main

import (
	"testing"

	"github.com/trustplane/trustplane/common/manager/managertest"
)

func TestHelpPrintsUsageAndExitsZero(t *testing.T) {
	managertest.ExpectHelp(t, "TestHelpPrintsUsageAndExitsZero", main,
		"requeue-after", "metrics-bind-address", "kube-api-qps", "zap-log-level", "kubeconfig")
}
