package e2e_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/e2e/framework"
)

// cluster is the one the specs run against: a local control plane with the
// operators as processes and a real node where pods run (the default,
// `make e2e`; E2E_NODE=skip leaves the node out), the same with the
// operators deployed as pods on the real node (E2E_CLUSTER=deployed; with
// E2E_INSTALL=installer they come from the installers, with E2E_INSTALL=helm
// from a `helm install` of charts/trustplane), or a kind cluster
// (E2E_CLUSTER=kind, `make e2e-kind`).
var cluster framework.Cluster

// smoke labels the specs that `make test` also runs on the deployed cluster
// (E2E_CLUSTER=deployed): one or two of each operator, through SPIRE and
// through pods, and a restart; `make e2e-deployed` runs every spec there.
var smoke = Label("smoke")

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Trustplane end to end")
}

var _ = BeforeSuite(func(ctx context.Context) {
	var err error
	switch os.Getenv("E2E_CLUSTER") {
	case "kind":
		cluster, err = framework.ConnectKind(ctx, framework.KindOptions{})
	case "deployed":
		cluster, err = framework.StartDeployed(ctx, framework.LocalOptions{Progress: GinkgoWriter})
	default:
		cluster, err = framework.StartLocal(ctx, framework.LocalOptions{Progress: GinkgoWriter, RealNode: os.Getenv("E2E_NODE") != "skip"})
	}
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(cluster.Stop()).To(Succeed()) })
}, NodeTimeout(15*time.Minute))

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() && cluster != nil {
		AddReportEntry("diagnostics", cluster.Diagnostics())
	}
})
