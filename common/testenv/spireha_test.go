package testenv_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"

	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("SpireHA", Ordered, func() {
	var ha *testenv.SpireHA

	BeforeAll(func() {
		var err error
		ha, err = testenv.StartSpireHA(testenv.SpireOptions{LogLevel: "INFO"}, 2)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(ha.Logs())
			}
			Expect(ha.Cleanup()).To(Succeed())
		})
		Expect(ha.Servers).To(HaveLen(2))
	})

	dial := func(ctx context.Context, s *testenv.Spire) *grpc.ClientConn {
		conn, err := s.Dial(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		return conn
	}

	It("runs two servers of one trust domain on their own ports and sockets, each with its own CA in one shared bundle", func(ctx context.Context) {
		a, b := ha.Servers[0], ha.Servers[1]
		Expect(a.Address).NotTo(Equal(b.Address))
		Expect(a.SocketPath).NotTo(Equal(b.SocketPath))
		Expect(a.Logs()).To(ContainSubstring("postgres"))

		var bundles []*types.Bundle
		for _, s := range ha.Servers {
			bundle, err := bundlev1.NewBundleClient(dial(ctx, s)).GetBundle(ctx, &bundlev1.GetBundleRequest{})
			Expect(err).NotTo(HaveOccurred())
			Expect(bundle.TrustDomain).To(Equal("example.org"))
			bundles = append(bundles, bundle)
		}
		Expect(bundles[0].X509Authorities).To(HaveLen(2), "one CA per server")
		Expect(bundles[1].X509Authorities).To(ConsistOf(bundles[0].X509Authorities))
		Expect(bundles[0].X509Authorities[0].Asn1).NotTo(Equal(bundles[0].X509Authorities[1].Asn1))
	})

	It("lists through one server the entry created through the other, and the agent attested by it", func(ctx context.Context) {
		created, err := entryv1.NewEntryClient(dial(ctx, ha.Servers[0])).BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
			SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/ha/workload"},
			ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/ha/node"},
			Selectors: []*types.Selector{{Type: "unix", Value: "uid:1000"}},
		}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(created.Results[0].Status.Code).To(BeZero(), created.Results[0].Status.Message)
		id := created.Results[0].Entry.Id

		got, err := entryv1.NewEntryClient(dial(ctx, ha.Servers[1])).GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
		Expect(err).NotTo(HaveOccurred())
		Expect(got.SpiffeId.Path).To(Equal("/ha/workload"))

		agent, err := ha.Servers[0].StartAgent(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(agent.Cleanup)
		out, err := ha.Servers[1].CLI(ctx, "agent", "list")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring(agent.ID))
	})

	It("keeps serving reads and writes through the other server when one is killed, and takes the killed one back", func(ctx context.Context) {
		Expect(ha.Servers[0].Kill()).To(Succeed())
		Expect(ha.Servers[0].Running()).To(BeFalse())

		entries := entryv1.NewEntryClient(dial(ctx, ha.Servers[1]))
		created, err := entries.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
			SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/ha/after-kill"},
			ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/ha/node"},
			Selectors: []*types.Selector{{Type: "unix", Value: "uid:1001"}},
		}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(created.Results[0].Status.Code).To(BeZero(), created.Results[0].Status.Message)
		list, err := entries.ListEntries(ctx, &entryv1.ListEntriesRequest{Filter: &entryv1.ListEntriesRequest_Filter{
			ByParentId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/ha/node"},
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Entries).To(HaveLen(2))

		Expect(ha.Servers[0].Restart()).To(Succeed())
		Eventually(func(g Gomega) {
			got, err := entryv1.NewEntryClient(dial(ctx, ha.Servers[0])).GetEntry(ctx, &entryv1.GetEntryRequest{Id: created.Results[0].Entry.Id})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.SpiffeId.Path).To(Equal("/ha/after-kill"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
})
