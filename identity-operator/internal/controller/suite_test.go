package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/setup"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

const (
	trustDomain = "example.org"
	parentID    = "spiffe://example.org/k8s-cluster-nodes"
	environment = "test"
	// operatorNamespace and operatorSA are where config/rbac puts the
	// operator's service account.
	operatorNamespace = "trustplane-system"
	operatorSA        = "identity-operator"
)

// poolMissingGrace is the operator's --pool-missing-grace in this suite.
const poolMissingGrace = 3 * time.Second

// boundaryPollInterval is how often the suite's operator reads the
// InferencePool CRD and the identity boundary's admission policies.
const boundaryPollInterval = time.Second

var (
	cp     *testenv.ControlPlane
	k8s    client.Client
	scheme *runtime.Scheme
	cancel context.CancelFunc
	// operatorConfig authenticates as the operator's service account, which
	// holds only the generated ClusterRole (config/rbac/role.yaml), as in e2e.
	operatorConfig *rest.Config
	// operatorCache is the running operator's informer cache.
	operatorCache client.Reader
	// outputLists records the operator's own lists of outputs that reach
	// the API server (not its informers' lists and watches).
	outputLists = &listRecorder{}
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "identity-operator controller suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	scheme, err = setup.NewScheme()
	Expect(err).NotTo(HaveOccurred())
	external, err := testsupport.ExternalCRDs()
	Expect(err).NotTo(HaveOccurred())
	cp, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{
		CRDDirectoryPaths: append(testsupport.OwnCRDs(), external...),
		Scheme:            scheme,
	})
	Expect(err).NotTo(HaveOccurred())
	k8s = cp.Client
	operatorConfig = installOperatorRBAC(context.Background(), cp)
	installOutputPolicy(context.Background())
	installOwnResourcesPolicy(context.Background())
	// The identity boundary's policies are in force from the start, so the
	// BoundaryEnforced condition of every binding changes only inside the
	// spec that takes one of them away.
	applyPolicyManifests(context.Background())
	testenv.ObserveRequests(operatorConfig, outputLists.see)
	// The client limits the operator runs with (common/manager's defaults),
	// not client-go's 5 requests a second.
	mdef := manager.Defaults()
	operatorConfig.QPS, operatorConfig.Burst = mdef.KubeQPS, mdef.KubeBurst

	fw := config.Default()
	fw.DefaultEnvironment = environment
	fw.RequeueAfterOnError = 50 * time.Millisecond
	fw.MaxBackoff = time.Second
	outputs := []output.Kind{output.KindSpiffeEntry, output.KindClusterSPIFFEID}
	s := setup.Settings{
		Framework:           fw,
		TrustDomain:         spiffeid.RequireTrustDomainFromString(trustDomain),
		ParentID:            parentID,
		Outputs:             outputs,
		Manager:             manager.Options{MetricsAddr: "0", ProbeAddr: "0"},
		OrphanSweepInterval: 300 * time.Millisecond,
		CRDPollInterval:     boundaryPollInterval,
		Handler: identitybinding.Options{
			TrustDomain:      spiffeid.RequireTrustDomainFromString(trustDomain),
			ParentID:         parentID,
			Outputs:          outputs,
			WithdrawalRetry:  200 * time.Millisecond,
			PoolMissingGrace: poolMissingGrace,
		},
	}
	mgr, err := ctrl.NewManager(operatorConfig, setup.ManagerOptions(s, scheme))
	Expect(err).NotTo(HaveOccurred())
	operatorCache = mgr.GetCache()
	var ctx context.Context
	ctx, cancel = context.WithCancel(context.Background())
	Expect(setup.Register(ctx, mgr, s, prometheus.NewRegistry())).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	Expect(cp.Stop()).To(Succeed())
})

// installOperatorRBAC runs the operator as its service account holding only
// config/rbac/role.yaml unchanged, as in e2e, so every spec also proves the
// generated RBAC is enough.
func installOperatorRBAC(ctx context.Context, cp *testenv.ControlPlane) *rest.Config {
	access, err := cp.AsServiceAccount(ctx, operatorNamespace, operatorSA,
		filepath.Join(testsupport.ModuleRoot(), "config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	return access.Config
}
