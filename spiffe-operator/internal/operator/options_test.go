package operator_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

var _ = Describe("Options", func() {
	valid := func() operator.Options {
		return operator.Options{Connect: spireconn.Options{SocketPath: "/run/spire/api.sock"}, PageSize: 100, WriteConcurrency: 1}
	}

	It("accepts an empty entry ID prefix, to be derived from the cluster", func() {
		Expect(valid().Validate()).To(Succeed())
	})

	It("names each invalid setting", func() {
		o := valid()
		o.EntryIDPrefix = "no dot"
		o.PageSize = 0
		o.WriteConcurrency = 0
		o.ClusterName = "prod/../other"
		err := o.Validate()
		Expect(err).To(HaveOccurred())
		for _, want := range []string{"entry-id-prefix", "spire-page-size must be positive", "spire-write-concurrency must be at least 1",
			`cluster-name "prod/../other"`} {
			Expect(err.Error()).To(ContainSubstring(want))
		}
	})

	// A class whose name makes no valid lease name ("a..b") leads on
	// spiffe-operator-<16 hex digits of its SHA-256>.trustplane.dev; an
	// instance given those digits as its class built the same lease, so
	// one of the two classes was never reconciled. Seen failing before
	// manager.CheckInstance: the class was accepted.
	It("refuses a class name that would lead on another class's lease", func() {
		for _, victim := range []string{"a..b", "blue..eu", "a.-b"} {
			sum := sha256.Sum256([]byte(victim))
			attacker := hex.EncodeToString(sum[:])[:16]
			o := valid()
			o.ClassName = victim
			Expect(o.Validate()).To(Succeed(), victim)
			o.ClassName = attacker
			Expect(o.Validate()).To(MatchError(ContainSubstring("class-name")), "class %q leads on the lease of class %q", attacker, victim)
		}
	})

	It("loads its defaults from the flags, with flags over environment variables", func() {
		fs := pflag.NewFlagSet("spiffe-operator", pflag.ContinueOnError)
		operator.AddFlags(fs)
		GinkgoT().Setenv("SPIRE_PAGE_SIZE", "250")
		GinkgoT().Setenv("SPIRE_WRITE_CONCURRENCY", "3")
		Expect(fs.Parse([]string{"--spire-socket=/run/spire/api.sock", "--spire-write-concurrency=4", "--cluster-name=prod"})).To(Succeed())
		v, err := config.NewViper(fs)
		Expect(err).NotTo(HaveOccurred())
		o, err := operator.Load(v)
		Expect(err).NotTo(HaveOccurred())
		Expect(o.Connect.SocketPath).To(Equal("/run/spire/api.sock"))
		Expect(o.EntryIDPrefix).To(BeEmpty(), "derived from the cluster at startup")
		Expect(o.PageSize).To(Equal(int32(250)), "from the environment")
		Expect(o.WriteConcurrency).To(Equal(4), "the flag wins over the environment")
		Expect(o.RPCTimeout).To(Equal(30 * time.Second))
		Expect(o.CollectOrphans).To(BeTrue())
		Expect(o.ClusterName).To(Equal("prod"))
		Expect(o.Manager.GCPercent).To(Equal(10))
		Expect(o.Manager.KubeQPS).To(Equal(float32(50)))
	})

	It("refuses to load invalid settings, naming them", func() {
		fs := pflag.NewFlagSet("spiffe-operator", pflag.ContinueOnError)
		operator.AddFlags(fs)
		Expect(fs.Parse([]string{"--spire-socket=/run/spire/api.sock", "--entry-id-prefix=has space."})).To(Succeed())
		v, err := config.NewViper(fs)
		Expect(err).NotTo(HaveOccurred())
		_, err = operator.Load(v)
		Expect(err).To(MatchError(ContainSubstring("entry-id-prefix")))

		// The last: another cluster's derived prefix, given by hand.
		for _, prefix := range []string{"trustplane.", "team.0f1e2d3c4b5a.", "trustplane.0badc0de."} {
			_, err := loadFlags("--entry-id-prefix=" + prefix)
			Expect(err).To(MatchError(ContainSubstring("entry-id-prefix")), prefix)
		}
	})

	It("refuses a class name no object can have, and gives each class a leader election lease of its own", func() {
		for _, name := range []string{"Blue", "blue_green", "-blue", "blue.", strings.Repeat("b", 64)} {
			_, err := loadFlags("--class-name=" + name)
			Expect(err).To(MatchError(ContainSubstring("class-name")), name)
		}
		v, err := loadFlags("--class-name=blue.eu-1")
		Expect(err).NotTo(HaveOccurred())
		process := operator.Process()
		Expect(process.Instance(v)).To(Equal("blue.eu-1"))
		Expect(manager.Options{LeaderElect: true}.ManagerOptions(manager.InstanceName(process.Name, process.Instance(v))).LeaderElectionID).
			To(Equal("spiffe-operator-blue.eu-1.trustplane.dev"))
	})

	It("derives the default entry ID prefix from the kube-system namespace's UID", func() {
		var ks corev1.Namespace
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "kube-system"}, &ks)).To(Succeed())
		want := "trustplane." + strings.ReplaceAll(string(ks.UID), "-", "")[:8] + "."

		opCtx, cancel := context.WithCancel(context.Background())
		other, err := operator.New(opCtx, cp.Config, operator.Options{
			Config:           config.Default(),
			Connect:          spireconn.Options{SocketPath: srv.SocketPath},
			TrustDomain:      trustDomain,
			PageSize:         100,
			WriteConcurrency: 1,
			Manager:          manager.Options{KubeQPS: 10, KubeBurst: 20, MetricsAddr: "0", ProbeAddr: "0", Reentrant: true},
		}, prometheus.NewRegistry())
		Expect(err).NotTo(HaveOccurred())
		cancel()
		Expect(other.Start(opCtx)).To(Succeed())
		Expect(other.EntryIDPrefix).To(Equal(want))
	})
})

// loadFlags loads the operator's settings from a SPIRE socket and args, and
// returns them as read (in a viper) with the error of Load.
func loadFlags(args ...string) (*viper.Viper, error) {
	GinkgoHelper()
	fs := pflag.NewFlagSet("spiffe-operator", pflag.ContinueOnError)
	operator.AddFlags(fs)
	Expect(fs.Parse(append([]string{"--spire-socket=/run/spire/api.sock"}, args...))).To(Succeed())
	v, err := config.NewViper(fs)
	Expect(err).NotTo(HaveOccurred())
	_, err = operator.Load(v)
	return v, err
}
