package spireconn_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
)

func TestSpireconn(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "spireconn")
}

const adminID = "spiffe://example.org/admin"

var spire *testenv.Spire

var _ = BeforeSuite(func() {
	var err error
	spire, err = testenv.StartSpire(testenv.SpireOptions{AdminIDs: []string{adminID}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(spire.Logs())
		}
		Expect(spire.Cleanup()).To(Succeed())
	})
})

// canWriteEntries proves an admin connection: it creates and deletes an entry.
func canWriteEntries(ctx context.Context, o spireconn.Options) {
	conn, closer, err := spireconn.Dial(ctx, o)
	Expect(err).NotTo(HaveOccurred())
	defer func() { Expect(closer.Close()).To(Succeed()) }()
	writeEntry(ctx, Default, entryv1.NewEntryClient(conn))
}

// writeEntry creates and deletes an entry through client.
func writeEntry(ctx context.Context, g Gomega, client entryv1.EntryClient) {
	resp, err := client.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
		SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: fmt.Sprintf("/probe/%d", time.Now().UnixNano())},
		ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/node"},
		Selectors: []*types.Selector{{Type: "unix", Value: "uid:4242"}},
	}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Results[0].Status.Code).To(BeZero(), resp.Results[0].Status.Message)
	_, err = client.BatchDeleteEntry(ctx, &entryv1.BatchDeleteEntryRequest{Ids: []string{resp.Results[0].Entry.Id}})
	g.Expect(err).NotTo(HaveOccurred())
}

var _ = Describe("Dial", func() {
	It("connects over the admin Unix socket", func(ctx context.Context) {
		canWriteEntries(ctx, spireconn.Options{SocketPath: spire.SocketPath})
	})

	It("connects over mTLS with a minted admin SVID from files", func(ctx context.Context) {
		dir, err := spire.MintX509SVID(ctx, adminID)
		Expect(err).NotTo(HaveOccurred())
		canWriteEntries(ctx, spireconn.Options{Address: spire.Address, ServerID: spire.ServerID,
			SVIDCertFile: filepath.Join(dir, "svid.pem"), SVIDKeyFile: filepath.Join(dir, "key.pem"), BundleFile: filepath.Join(dir, "bundle.pem")})
	})

	It("refuses a server that does not present the expected SPIFFE ID", func(ctx context.Context) {
		dir, err := spire.MintX509SVID(ctx, adminID)
		Expect(err).NotTo(HaveOccurred())
		conn, closer, err := spireconn.Dial(ctx, spireconn.Options{Address: spire.Address, ServerID: "spiffe://example.org/impostor",
			SVIDCertFile: filepath.Join(dir, "svid.pem"), SVIDKeyFile: filepath.Join(dir, "key.pem"), BundleFile: filepath.Join(dir, "bundle.pem")})
		Expect(err).NotTo(HaveOccurred())
		defer closer.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = bundlev1.NewBundleClient(conn).GetBundle(cctx, &bundlev1.GetBundleRequest{})
		Expect(status.Code(err)).To(Equal(codes.Unavailable), "%v", err)
	})

	It("connects over mTLS with an admin X509-SVID from a spire-agent's Workload API", func(ctx context.Context) {
		agent, err := spire.StartAgent(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(agent.Cleanup)
		_, err = spire.CLI(ctx, "entry", "create", "-admin", "-parentID", agent.ID,
			"-spiffeID", "spiffe://example.org/operator", "-selector", fmt.Sprintf("unix:uid:%d", os.Getuid()))
		Expect(err).NotTo(HaveOccurred())
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		canWriteEntries(wctx, spireconn.Options{Address: spire.Address, ServerID: spire.ServerID, WorkloadAPISocket: agent.SocketPath})
	}, SpecTimeout(90*time.Second))
})

var _ = Describe("Options", func() {
	DescribeTable("Validate names what to fix",
		func(o spireconn.Options, want string) {
			err := o.Validate()
			if want == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("admin socket", spireconn.Options{SocketPath: "/s"}, ""),
		Entry("nothing", spireconn.Options{}, "set --spire-socket (admin Unix socket) or --spire-address (mTLS)"),
		Entry("both", spireconn.Options{SocketPath: "/s", Address: "h:1"}, "not both"),
		Entry("bad server ID", spireconn.Options{Address: "h:1", ServerID: "nope", WorkloadAPISocket: "/w"}, "--spire-server-id"),
		Entry("incomplete files", spireconn.Options{Address: "h:1", ServerID: "spiffe://td/spire/server", SVIDCertFile: "c"}, "go together"),
		Entry("files and workload API", spireconn.Options{Address: "h:1", ServerID: "spiffe://td/spire/server", SVIDCertFile: "c", SVIDKeyFile: "k", BundleFile: "b", WorkloadAPISocket: "/w"}, "not both"),
		Entry("no identity", spireconn.Options{Address: "h:1", ServerID: "spiffe://td/spire/server"}, "mTLS needs"),
		Entry("workload API", spireconn.Options{Address: "h:1", ServerID: "spiffe://td/spire/server", WorkloadAPISocket: "/w"}, ""),
		Entry("sockets of servers in HA", spireconn.Options{SocketPath: "/a.sock, /b.sock"}, ""),
		Entry("an empty socket in the list", spireconn.Options{SocketPath: "/a.sock,,/b.sock"}, `--spire-socket "/a.sock,,/b.sock": an empty item in the list`),
		Entry("a socket listed twice", spireconn.Options{SocketPath: "/a.sock,/a.sock"}, "/a.sock is listed twice"),
		Entry("addresses of servers in HA", spireconn.Options{Address: "a:1,b:1", ServerID: "spiffe://td/spire/server", WorkloadAPISocket: "/w"}, ""),
		Entry("an empty address in the list", spireconn.Options{Address: "a:1,", ServerID: "spiffe://td/spire/server", WorkloadAPISocket: "/w"}, `--spire-address "a:1,": an empty item in the list`),
		Entry("an address listed twice", spireconn.Options{Address: "a:1, a:1", ServerID: "spiffe://td/spire/server", WorkloadAPISocket: "/w"}, "a:1 is listed twice"),
	)

	It("reports whether SPIRE is configured at all", func() {
		Expect(spireconn.Options{}.Enabled()).To(BeFalse())
		Expect(spireconn.Options{Address: "h:1"}.Enabled()).To(BeTrue())
	})
})
