package main

import (
	"testing"

	"github.com/trustplane/trustplane/common/manager/managertest"
)

func TestHelpPrintsUsageAndExitsZero(t *testing.T) {
	managertest.ExpectHelp(t, "TestHelpPrintsUsageAndExitsZero", main,
		"requeue-after", "default-environment", "metrics-bind-address", "zap-log-level", "kubeconfig")
}
