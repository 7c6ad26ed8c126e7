package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// The status record used to be bounded to 1 MiB on its own, but a
// TrustBundle's inline source (up to 1 MiB at admission) lives in the same
// object. An inline source of ~700 KiB of CAs is admitted, fits a target,
// and its status record with PEM stays under 1 MiB, so the operator kept
// the PEM: spec and status together were then over etcd's 1.5 MiB request
// limit, and no status write could succeed. The pass must either publish
// and record its status, or report a clear condition (BundleTooLarge);
// never leave a TrustBundle whose conditions stay unwritten while its
// targets change.
var _ = Describe("An inline source whose status record does not fit beside it", func() {
	It("still records a condition for the current generation", func(ctx context.Context) {
		g := unique("inlinebig")
		ns := newNamespace(ctx, map[string]string{"group": g})
		var (
			pems   []string
			record []v1alpha1.PublishedCertificate
		)
		statusSize := func() int {
			raw, err := json.Marshal(struct {
				Certificates []v1alpha1.PublishedCertificate `json:"certificates"`
			}{record})
			Expect(err).NotTo(HaveOccurred())
			return len(raw)
		}
		for statusSize() < (1<<20)-8*1024 {
			ca := testpki.ValidCA("inline-big")
			sum := sha256.Sum256(ca.Cert.Raw)
			pems = append(pems, ca.PEM())
			record = append(record, v1alpha1.PublishedCertificate{SHA256: hex.EncodeToString(sum[:]),
				Subject: ca.Cert.Subject.String(), NotAfter: metav1.NewTime(ca.Cert.NotAfter), PEM: ca.PEM()})
		}
		inlineText := strings.Join(pems, "")
		GinkgoWriter.Printf("inline source %d bytes, status record about %d bytes, %d CAs\n", len(inlineText), statusSize(), len(pems))
		Expect(len(inlineText)).To(BeNumerically("<", 1<<20))

		tb := newTrustBundle(g, inline(inlineText))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })

		Eventually(func() string { return caData(ctx, ns) }).ShouldNot(BeEmpty(), "the target was never written")
		Eventually(func() string {
			cur := get(ctx, tb)
			r := readyReason(ctx, tb)
			switch {
			case r == "True" && cur.Status.Fingerprint != "":
				return "recorded"
			case r == "BundleTooLarge":
				return "refused clearly"
			}
			c := meta.FindStatusCondition(cur.Status.Conditions, "Ready")
			msg := ""
			if c != nil {
				msg = c.Message
			}
			return "Ready " + r + " (" + msg + "), status.fingerprint " + cur.Status.Fingerprint
		}).Should(BeElementOf("recorded", "refused clearly"),
			"the target in %s holds the bundle but its TrustBundle's status was never recorded", ns)
	})
})

// With options.retainRemovedFor, a CA removed from the source is kept for
// the grace period counted from status.certificates[].leftSourceAt. When
// the status could not be written (the inline source above), leftSourceAt
// was never recorded, each pass counted the grace from "now" again, and the
// removed CA was published for ever: a broadened bundle.
var _ = Describe("A removed CA under retainRemovedFor beside a large inline source", func() {
	It("leaves the bundle once the grace period has passed", func(ctx context.Context) {
		g := unique("retainbig")
		ns := newNamespace(ctx, map[string]string{"group": g})
		removed := testpki.ValidCA("removed-ca")
		tb := newTrustBundle(g, inline(removed.PEM()))
		tb.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: 2 * time.Second}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = cp.Client.Delete(ctx, tb) })
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(removed.PEM())))

		By("the source replaced by ~800 KB of other CAs, without the removed one")
		var pems []string
		for range 1490 {
			pems = append(pems, testpki.ValidCA("retain-big").PEM())
		}
		updateSpec(ctx, tb, func(cur *v1alpha1.TrustBundle) { cur.Spec.Sources = []v1alpha1.Source{inline(pems...)} })
		Eventually(func() bool { return strings.Contains(caData(ctx, ns), pems[0]) }).Should(BeTrue())

		Eventually(func() bool { return strings.Contains(caData(ctx, ns), removed.PEM()) }, 20*time.Second).Should(BeFalse(),
			"the CA removed from the source is still published 20s after the change, past its 2s grace period (status.fingerprint %q)",
			get(ctx, tb).Status.Fingerprint)
	})
})
