package operator_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

const (
	trustDomain = "example.org"
	adminID     = "spiffe://example.org/test/admin"
	resync      = 3 * time.Second
	// clusterName is the operator's --cluster-name.
	clusterName = "test-cluster"
)

var (
	cp       *testenv.ControlPlane
	srv      *testenv.Spire
	k8s      client.Client
	spireAPI *spire.Client
	// spireConn is the suite's connection to SPIRE's admin API.
	spireConn *grpc.ClientConn
	op        *operator.Operator
	// operatorConfig is the identity of the suite's operator: its service
	// account.
	operatorConfig *rest.Config
	// opMetrics holds the metrics of the operator startOperator started.
	opMetrics *prometheus.Registry
)

func TestOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "spiffe-operator integration")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)

	scheme, err := operator.Scheme()
	Expect(err).NotTo(HaveOccurred())
	cp, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{
		CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
		Scheme:            scheme,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(cp.Stop()).To(Succeed()) })
	k8s = cp.Client

	srv, err = testenv.StartSpire(testenv.SpireOptions{TrustDomain: trustDomain, AdminIDs: []string{adminID}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(lastLines(srv.Logs(), 60))
		}
		Expect(srv.Cleanup()).To(Succeed())
	})

	conn, closer, err := spireconn.Dial(context.Background(), spireconn.Options{SocketPath: srv.SocketPath})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(closer.Close)
	spireAPI = spire.NewClient(conn, spire.Options{})
	spireConn = conn

	// The suite's operator runs as its service account, holding only
	// config/rbac/role.yaml and held by the policy on its own resources,
	// as deployed: every spec also shows that they let it work.
	access, err := cp.AsServiceAccount(context.Background(), "trustplane-system", "spiffe-operator", filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	operatorConfig = access.Config
	installOwnResourcesPolicy(context.Background())

	startOperator()
	DeferCleanup(func() { stopOperator() })
})

// stopOperator stops the running operator and waits for it to exit.
var stopOperator func()

// startOperator builds and starts an operator against the suite's API
// server and SPIRE, and sets op and stopOperator.
func startOperator() {
	GinkgoHelper()
	opMetrics = prometheus.NewRegistry()
	op, stopOperator = launchRegistered(operatorConfig, nil, opMetrics)
}

// launch builds and starts an operator against the API server of cfg and
// the suite's SPIRE, with the suite's settings changed by mut (nil keeps
// them), and returns it with a function that stops it and waits for it to
// exit. The entry ID prefix is the cluster's default.
func launch(restCfg *rest.Config, mut func(*operator.Options)) (*operator.Operator, func()) {
	GinkgoHelper()
	return launchRegistered(restCfg, mut, prometheus.NewRegistry())
}

// launchRegistered is launch with the operator's metrics registered in reg.
func launchRegistered(restCfg *rest.Config, mut func(*operator.Options), reg *prometheus.Registry) (*operator.Operator, func()) {
	GinkgoHelper()
	cfg := config.Default()
	cfg.RequeueAfter = resync
	cfg.JitterFactor = 0.1
	cfg.RequeueAfterOnError = 100 * time.Millisecond
	cfg.MaxBackoff = time.Second
	cfg.DefaultEnvironment = "test"
	opts := operator.Options{
		Config:           cfg,
		Connect:          spireconn.Options{SocketPath: srv.SocketPath},
		TrustDomain:      trustDomain,
		PageSize:         100,
		WriteConcurrency: 2,
		RPCTimeout:       5 * time.Second,
		CollectOrphans:   true,
		ClusterName:      clusterName,
		Manager:          manager.Options{KubeQPS: 100, KubeBurst: 200, MetricsAddr: "0", ProbeAddr: "0", Reentrant: true},
	}
	if mut != nil {
		mut(&opts)
	}
	// The default prefix comes from kube-system, which the API server
	// creates shortly after it starts.
	c, err := client.New(restCfg, client.Options{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error {
		return c.Get(context.Background(), client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})
	}).Should(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	o, err := operator.New(ctx, restCfg, opts, reg)
	Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- o.Start(ctx) }()
	return o, func() {
		cancel()
		Eventually(done).Should(Receive(Not(HaveOccurred())))
	}
}

// whileOperatorDown stops the operator, runs change and starts a new one,
// as a crash or an upgrade would.
func whileOperatorDown(change func()) {
	GinkgoHelper()
	stopOperator()
	change()
	startOperator()
}

// entriesUnder lists SPIRE's entries under parent.
func entriesUnder(parent string) []*types.Entry {
	GinkgoHelper()
	list, err := spireAPI.ListByParent(context.Background(), spiffeid.RequireFromString(parent))
	Expect(err).NotTo(HaveOccurred())
	return list
}

func lastLines(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			lines++
			if lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}
