package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	bundlecontroller "github.com/trustplane/trustplane/bundle-operator/internal/controller"
	"github.com/trustplane/trustplane/bundle-operator/internal/operator"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// sourceNamespace is the only namespace the operator reads ConfigMap and
// Secret sources from.
const sourceNamespace = "trusted-sources"

var (
	cp       *testenv.ControlPlane
	spireSrv *testenv.Spire
	scheme   = runtime.NewScheme()
	// stopManager stops the running operator; operatorCache is its cache.
	stopManager   context.CancelFunc
	operatorCache cache.Cache
	// operatorConfig is the operator's identity: its service account
	// (operatorUnderPolicies).
	operatorConfig *rest.Config
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)
	RunSpecs(t, "bundle-operator controller")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	var err error
	cp, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{
		CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
		Scheme:            scheme,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(cp.Stop()).To(Succeed()) })

	spireSrv, err = testenv.StartSpire(testenv.SpireOptions{TrustDomain: "example.org"})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(spireSrv.Logs())
		}
		Expect(spireSrv.Cleanup()).To(Succeed())
	})
	Expect(cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sourceNamespace}})).To(Succeed())
	// The operator runs as its service account, holding only its RBAC and
	// held by its admission policies, as deployed: every spec also shows
	// that they let it do its work.
	operatorConfig, _ = operatorUnderPolicies(context.Background())
	stopManager = startManager()
	DeferCleanup(func() { stopManager() })
})

// startManager runs the operator's controller in this process, as
// cmd/main.go wires it, and returns a function that stops it.
func startManager() context.CancelFunc { return startManagerAs(operatorConfig, spireSrv.SocketPath) }

// runManagerAs replaces the suite's operator, for the rest of the calling
// spec or container, by one running as cfg against the SPIRE sockets
// spireSocket (comma-separated), and brings the suite's own back after it.
func runManagerAs(cfg *rest.Config, spireSocket string) {
	stopManager()
	stopManager = startManagerAs(cfg, spireSocket)
	DeferCleanup(func() {
		stopManager()
		stopManager = startManager()
	})
}

// startManagerAs is startManager with the identity and transport of cfg,
// reading the spire-server of spireSocket.
func startManagerAs(cfg *rest.Config, spireSocket string) context.CancelFunc {
	cacheOpts, err := bundlecontroller.CacheOptions([]string{sourceNamespace}, true)
	Expect(err).NotTo(HaveOccurred())
	// The client limits the operator runs with, not client-go's 5 requests
	// a second.
	cfg = rest.CopyConfig(cfg)
	defaults := operator.Process().Defaults
	cfg.QPS, cfg.Burst = defaults.KubeQPS, defaults.KubeBurst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             crconfig.Controller{SkipNameValidation: ptrTo(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	sc, err := spire.Dial(context.Background(), spireconn.Options{SocketPath: spireSocket})
	Expect(err).NotTo(HaveOccurred())
	m, err := controller.NewMetrics(prometheus.NewRegistry())
	Expect(err).NotTo(HaveOccurred())
	opts := config.Default()
	opts.RequeueAfterOnError = 200 * time.Millisecond
	opts.MaxBackoff = 2 * time.Second
	Expect(bundlecontroller.Setup(mgr, bundlecontroller.Options{
		Config: opts, Metrics: m, Spire: sc, AllowSecretSources: true, AllowSecretTargets: true, ClusterTrustBundles: true, SourceNamespaces: []string{sourceNamespace},
		PollInterval: 300 * time.Millisecond,
	})).To(Succeed())

	operatorCache = mgr.GetCache()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return func() {
		cancel()
		<-done
		_ = sc.Close()
	}
}

func ptrTo[T any](v T) *T { return &v }
