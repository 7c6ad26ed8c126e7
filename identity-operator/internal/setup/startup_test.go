package setup

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

// TestStartupWithMissingCRDs proves against a real API server that holds
// only the operator's own CRDs and SpiffeEntry: a missing InferencePool CRD
// does not stop the operator (bindings report InferencePoolCRDMissing), and
// an output whose CRD is missing is a clear startup error, not a crash or a
// cache that never syncs.
func TestStartupWithMissingCRDs(t *testing.T) {
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{CRDDirectoryPaths: testsupport.OwnCRDs(), Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	td := spiffeid.RequireTrustDomainFromString("example.org")
	register := func(outputs ...output.Kind) error {
		st := Settings{
			Framework: config.Default(), TrustDomain: td, ParentID: "spiffe://example.org/nodes", Outputs: outputs,
			Manager: manager.Options{MetricsAddr: "0", ProbeAddr: "0"},
			Handler: identitybinding.Options{TrustDomain: td, ParentID: "spiffe://example.org/nodes", Outputs: outputs},
		}
		mgr, err := ctrl.NewManager(cp.Config, ManagerOptions(st, s))
		if err != nil {
			t.Fatal(err)
		}
		return Register(context.Background(), mgr, st, prometheus.NewRegistry())
	}

	if err := register(output.KindSpiffeEntry); err != nil {
		t.Fatalf("without the InferencePool CRD the operator must still start: %v", err)
	}
	err = register(output.KindSpiffeEntry, output.KindClusterSPIFFEID)
	if err == nil || !strings.Contains(err.Error(), "ClusterSPIFFEID CRD") {
		t.Fatalf("want a startup error naming the ClusterSPIFFEID CRD, got %v", err)
	}
}
