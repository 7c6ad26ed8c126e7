package spireconn_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"google.golang.org/grpc"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("Dial to servers in HA", Ordered, func() {
	var ha *testenv.SpireHA

	BeforeAll(func() {
		var err error
		ha, err = testenv.StartSpireHA(testenv.SpireOptions{AdminIDs: []string{adminID}, LogLevel: "INFO"}, 2)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(ha.Logs())
			}
			Expect(ha.Cleanup()).To(Succeed())
		})
	})

	// Every spec starts with both servers up.
	BeforeEach(func() {
		for _, s := range ha.Servers {
			if !s.Running() {
				Expect(s.Restart()).To(Succeed())
			}
		}
	})

	dial := func(ctx context.Context, o spireconn.Options) *grpc.ClientConn {
		conn, closer, err := spireconn.Dial(ctx, o)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(closer.Close)
		return conn
	}

	It("fails over between admin sockets listed with commas", func(ctx context.Context) {
		failsOver(ctx, dial(ctx, spireconn.Options{SocketPath: strings.Join(ha.SocketPaths(), ", ")}), ha.Servers[0].Kill)
	})

	It("fails over between mTLS addresses listed with commas", func(ctx context.Context) {
		// The SVID of one server is trusted by the other: the bundle is shared.
		dir, err := ha.Servers[1].MintX509SVID(ctx, adminID)
		Expect(err).NotTo(HaveOccurred())
		failsOver(ctx, dial(ctx, spireconn.Options{
			Address: strings.Join(ha.Addresses(), ","), ServerID: ha.Servers[0].ServerID,
			SVIDCertFile: filepath.Join(dir, "svid.pem"), SVIDKeyFile: filepath.Join(dir, "key.pem"), BundleFile: filepath.Join(dir, "bundle.pem"),
		}), ha.Servers[0].Kill)
	})

	It("serves through the listed servers that are up when one is down from the start, and takes it back once up", func(ctx context.Context) {
		Expect(ha.Servers[0].Kill()).To(Succeed())
		conn := dial(ctx, spireconn.Options{SocketPath: strings.Join(ha.SocketPaths(), ",")})
		entries := entryv1.NewEntryClient(conn)
		for range 10 {
			_, err := entries.CountEntries(ctx, &entryv1.CountEntriesRequest{})
			Expect(err).NotTo(HaveOccurred())
		}
		canWrite(ctx, conn)

		// Once the first is back and the second goes, the connection reaches
		// the first again by itself.
		Expect(ha.Servers[0].Restart()).To(Succeed())
		Expect(ha.Servers[1].Kill()).To(Succeed())
		Eventually(func() error {
			_, err := entries.CountEntries(ctx, &entryv1.CountEntriesRequest{})
			return err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		canWrite(ctx, conn)
	})
})

// failsOver reads and writes through conn with both servers up, kills
// a server with kill while readers call without pause and proves that
// no read failed, not even one in flight on the killed server, and
// that writes go on through the other server.
func failsOver(ctx context.Context, conn *grpc.ClientConn, kill func() error) {
	GinkgoHelper()
	entries := entryv1.NewEntryClient(conn)
	canWrite(ctx, conn)

	var (
		calls, failed atomic.Int64
		stop          = make(chan struct{})
		readers       sync.WaitGroup
	)
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := entries.ListEntries(ctx, &entryv1.ListEntriesRequest{}); err != nil {
					failed.Add(1)
					GinkgoWriter.Println("read failed:", err)
				}
				calls.Add(1)
			}
		})
	}
	Eventually(calls.Load).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 40))
	Expect(kill()).To(Succeed())
	atKill := calls.Load()
	Eventually(calls.Load).WithTimeout(10*time.Second).Should(BeNumerically(">=", atKill+100), "reads go on after the kill")
	close(stop)
	readers.Wait()
	Expect(failed.Load()).To(BeZero(), "reads failed out of %d", calls.Load())
	canWrite(ctx, conn)
}

// canWrite proves an admin connection that can write: it creates and deletes
// an entry.
func canWrite(ctx context.Context, conn *grpc.ClientConn) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		writeEntry(ctx, g, entryv1.NewEntryClient(conn))
	}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
}

var _ = Describe("Dial to servers in HA behind one DNS name", func() {
	It("balances over the name's addresses and fails over when the server at one of them is killed", func(ctx context.Context) {
		pg, err := testenv.StartPostgres()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(pg.Cleanup)
		db, err := pg.CreateDatabase(ctx, "spire")
		Expect(err).NotTo(HaveOccurred())
		// One port at two loopback addresses, as pods behind a headless Service.
		port, err := testenv.FreePortOn("127.0.0.2")
		Expect(err).NotTo(HaveOccurred())
		var servers []*testenv.Spire
		for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
			s, err := testenv.StartSpire(testenv.SpireOptions{AdminIDs: []string{adminID}, LogLevel: "INFO",
				BindAddress: ip, Port: port, PostgresConnection: db})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(s.Cleanup)
			servers = append(servers, s)
		}
		// The SVID's bundle must hold both servers' CAs.
		Eventually(func(g Gomega) {
			shown, err := servers[1].BundlePEM(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Count(shown, "BEGIN CERTIFICATE")).To(Equal(2))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		dir, err := servers[1].MintX509SVID(ctx, adminID)
		Expect(err).NotTo(HaveOccurred())

		dns := startDNS("spire.test", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
		conn, closer, err := spireconn.Dial(ctx, spireconn.Options{
			Address: fmt.Sprintf("dns://%s/spire.test:%d", dns, port), ServerID: servers[0].ServerID,
			SVIDCertFile: filepath.Join(dir, "svid.pem"), SVIDKeyFile: filepath.Join(dir, "key.pem"), BundleFile: filepath.Join(dir, "bundle.pem"),
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(closer.Close)
		failsOver(ctx, conn, servers[0].Kill)
	})
})
