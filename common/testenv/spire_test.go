package testenv_test

import (
	"context"
	"crypto/x509"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("Spire", Ordered, func() {
	const adminID = "spiffe://example.org/admin"
	var spire *testenv.Spire

	BeforeAll(func() {
		var err error
		spire, err = testenv.StartSpire(testenv.SpireOptions{AdminIDs: []string{adminID}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(spire.Logs())
			}
			Expect(spire.Cleanup()).To(Succeed())
		})
		Expect(len(spire.SocketPath)).To(BeNumerically("<", 108))
	})

	It("creates, lists by parent, updates with a mask and deletes an entry over the admin socket", func(ctx context.Context) {
		conn, err := spire.Dial(ctx)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		entries := entryv1.NewEntryClient(conn)
		parent := &types.SPIFFEID{TrustDomain: "example.org", Path: "/node/a"}

		created, err := entries.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
			SpiffeId:    &types.SPIFFEID{TrustDomain: "example.org", Path: "/workload"},
			ParentId:    parent,
			Selectors:   []*types.Selector{{Type: "unix", Value: "uid:1000"}},
			X509SvidTtl: 600,
			Hint:        "keep-me",
		}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(created.Results).To(HaveLen(1))
		Expect(created.Results[0].Status.Code).To(BeZero(), created.Results[0].Status.Message)
		id := created.Results[0].Entry.Id

		other, err := entries.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
			SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/elsewhere"},
			ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/node/b"},
			Selectors: []*types.Selector{{Type: "unix", Value: "uid:1001"}},
		}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(other.Results[0].Status.Code).To(BeZero())

		listed, err := entries.ListEntries(ctx, &entryv1.ListEntriesRequest{Filter: &entryv1.ListEntriesRequest_Filter{ByParentId: parent}})
		Expect(err).NotTo(HaveOccurred())
		Expect(listed.Entries).To(HaveLen(1))
		Expect(listed.Entries[0].Id).To(Equal(id))

		updated, err := entries.BatchUpdateEntry(ctx, &entryv1.BatchUpdateEntryRequest{
			Entries:   []*types.Entry{{Id: id, X509SvidTtl: 1200}},
			InputMask: &types.EntryMask{X509SvidTtl: true},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(updated.Results[0].Status.Code).To(BeZero(), updated.Results[0].Status.Message)
		got, err := entries.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
		Expect(err).NotTo(HaveOccurred())
		Expect(got.X509SvidTtl).To(Equal(int32(1200)))
		Expect(got.Hint).To(Equal("keep-me"), "a masked update must not clear other fields")

		deleted, err := entries.BatchDeleteEntry(ctx, &entryv1.BatchDeleteEntryRequest{Ids: []string{id}})
		Expect(err).NotTo(HaveOccurred())
		Expect(deleted.Results[0].Status.Code).To(BeZero())
		_, err = entries.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
		Expect(status.Code(err)).To(Equal(codes.NotFound))
	})

	It("serves GetBundle over mTLS to a minted admin SVID", func(ctx context.Context) {
		dir, err := spire.MintX509SVID(ctx, adminID)
		Expect(err).NotTo(HaveOccurred())
		conn, err := spire.DialMTLS(ctx, dir)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		bundle, err := bundlev1.NewBundleClient(conn).GetBundle(ctx, &bundlev1.GetBundleRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(bundle.TrustDomain).To(Equal("example.org"))
		Expect(bundle.X509Authorities).NotTo(BeEmpty())
	})

	It("denies entry writes to a non-admin SVID", func(ctx context.Context) {
		dir, err := spire.MintX509SVID(ctx, "spiffe://example.org/not-admin")
		Expect(err).NotTo(HaveOccurred())
		conn, err := spire.DialMTLS(ctx, dir)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		_, err = entryv1.NewEntryClient(conn).BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
			SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/sneaky"},
			ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/node/a"},
			Selectors: []*types.Selector{{Type: "unix", Value: "uid:0"}},
		}}})
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied))
	})

	It("survives a restart with its entries", func(ctx context.Context) {
		conn, err := spire.Dial(ctx)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		entries := entryv1.NewEntryClient(conn)
		before, err := entries.CountEntries(ctx, &entryv1.CountEntriesRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(spire.Restart()).To(Succeed())
		after, err := entries.CountEntries(ctx, &entryv1.CountEntriesRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(after.Count).To(Equal(before.Count))
	})

	It("attests a spire-agent with a join token", func(ctx context.Context) {
		agent, err := spire.StartAgent(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(agent.Cleanup)
		out, err := spire.CLI(ctx, "agent", "list")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring(agent.ID))
	})
})

var _ = Describe("Spire with a bundle endpoint", func() {
	It("serves its bundle at BundleEndpointURL, authenticated by its own SVID (https_spiffe)", func(ctx context.Context) {
		s, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "partner.test", BundleEndpoint: true, LogLevel: "INFO"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Cleanup)
		Expect(s.BundleEndpointURL).To(HavePrefix("https://127.0.0.1:"))

		conn, err := s.Dial(ctx)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		own, err := bundlev1.NewBundleClient(conn).GetBundle(ctx, &bundlev1.GetBundleRequest{})
		Expect(err).NotTo(HaveOccurred())
		td := spiffeid.RequireTrustDomainFromString("partner.test")
		source := x509bundle.New(td)
		for _, a := range own.X509Authorities {
			cert, err := x509.ParseCertificate(a.Asn1)
			Expect(err).NotTo(HaveOccurred())
			source.AddX509Authority(cert)
		}
		fetched, err := federation.FetchBundle(ctx, td, s.BundleEndpointURL,
			federation.WithSPIFFEAuth(source, spiffeid.RequireFromString(s.ServerID)))
		Expect(err).NotTo(HaveOccurred())
		Expect(fetched.X509Authorities()).To(HaveLen(len(own.X509Authorities)))
		Expect(fetched.X509Authorities()[0].Raw).To(Equal(own.X509Authorities[0].Asn1))
	})
})
