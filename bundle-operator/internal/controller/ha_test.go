package controller_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

var _ = Describe("SPIRE in HA", func() {
	It("keeps publishing the bundle through the other server when the one it read is killed, without Ready ever going False", func(ctx context.Context) {
		ha, err := testenv.StartSpireHA(testenv.SpireOptions{TrustDomain: "example.org", LogLevel: "INFO"}, 2)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(ha.Logs())
			}
			Expect(ha.Cleanup()).To(Succeed())
		})
		runManagerAs(cp.Config, strings.Join(ha.SocketPaths(), ","))

		group := unique("ha")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		shown, err := ha.Servers[1].BundlePEM(ctx)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(shown)), "both servers' CAs are published")
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		since := readySince(ctx, tb)

		Expect(ha.Servers[0].Kill()).To(Succeed())
		By("a new X.509 authority, appended through the server left")
		extra := testpki.ValidCA("ha-extra")
		conn, err := ha.Servers[1].Dial(ctx)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		_, err = bundlev1.NewBundleClient(conn).AppendBundle(ctx, &bundlev1.AppendBundleRequest{
			X509Authorities: []*types.X509Certificate{{Asn1: extra.Cert.Raw}},
		})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(shown, extra.PEM())), "the new authority is published")
		Consistently(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(shown, extra.PEM())))
		Expect(readyReason(ctx, tb)).To(Equal("True"))
		Expect(readySince(ctx, tb)).To(Equal(since), "Ready never left True")
	})
})

// readySince is when tb's Ready condition last changed.
func readySince(ctx context.Context, tb *v1alpha1.TrustBundle) metav1.Time {
	GinkgoHelper()
	c := meta.FindStatusCondition(get(ctx, tb).Status.Conditions, "Ready")
	Expect(c).NotTo(BeNil())
	return c.LastTransitionTime
}
