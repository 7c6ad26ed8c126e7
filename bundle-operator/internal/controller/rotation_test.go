package controller_test

import (
	"context"
	"crypto/x509"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/common/testenv"
)

// localAuthority runs `spire-server localauthority x509 <args> -output json`
// and returns the authority IDs of the answer by slot (active, prepared, old,
// prepared_authority, ...).
func localAuthority(ctx context.Context, args ...string) map[string]string {
	out, err := spireSrv.CLI(ctx, testenv.LocalAuthorityArgs(args...)...)
	Expect(err).NotTo(HaveOccurred(), out)
	ids, err := testenv.ParseLocalAuthorities(out)
	Expect(err).NotTo(HaveOccurred())
	return ids
}

func spireBundle(ctx context.Context) string {
	shown, err := spireSrv.BundlePEM(ctx)
	Expect(err).NotTo(HaveOccurred())
	return pemOf(shown)
}

func countCAs(pemText string) int {
	if pemText == "" {
		return 0
	}
	certs, err := bundle.ParsePEM([]byte(pemText))
	Expect(err).NotTo(HaveOccurred())
	return len(certs)
}

var _ = Describe("SPIRE CA rotation", func() {
	It("reaches every target without a restart, and a grace period does not keep the revoked CA", func(ctx context.Context) {
		group := unique("rot")
		nss := []string{newNamespace(ctx, map[string]string{"group": group}), newNamespace(ctx, map[string]string{"group": group})}
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		retained := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		retained.Spec.Target.ConfigMap.Name = "ca-retained"
		retained.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: time.Hour}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Expect(cp.Client.Create(ctx, retained)).To(Succeed())

		initial := spireBundle(ctx)
		for _, ns := range nss {
			Eventually(func() string { return caData(ctx, ns) }).Should(Equal(initial))
		}
		oldID := localAuthority(ctx, "show")["active"]
		Expect(oldID).NotTo(BeEmpty())

		By("preparing a new CA: SPIRE publishes it at once")
		newID := localAuthority(ctx, "prepare")["prepared_authority"]
		Expect(newID).NotTo(BeEmpty())
		prepared := spireBundle(ctx)
		Expect(countCAs(prepared)).To(Equal(countCAs(initial) + 1))
		for _, ns := range nss {
			Eventually(func() string { return caData(ctx, ns) }, 20*time.Second).Should(Equal(prepared))
		}

		By("activating it, then tainting and revoking the old CA")
		localAuthority(ctx, "activate", "-authorityID", newID)
		localAuthority(ctx, "taint", "-authorityID", oldID)
		localAuthority(ctx, "revoke", "-authorityID", oldID)
		rotated := spireBundle(ctx)
		Expect(countCAs(rotated)).To(Equal(countCAs(initial)))
		Expect(rotated).NotTo(Equal(initial))
		for _, ns := range nss {
			Eventually(func() string { return caData(ctx, ns) }, 20*time.Second).Should(Equal(rotated))
		}
		Eventually(func() string { return get(ctx, tb).Status.Fingerprint }).Should(Equal(bundle.New(mustParse(rotated), nil).Fingerprint()), "the status is written after the targets")

		By("the TrustBundle with a grace period drops the revoked CA at once: retention never keeps a CA that left SPIRE")
		for _, ns := range nss {
			Eventually(func() string { return keyData(ctx, ns, "ca-retained", "ca.crt") }, 20*time.Second).Should(Equal(rotated))
		}
		for _, c := range get(ctx, retained).Status.Certificates {
			Expect(c.LeftSourceAt).To(BeNil(), "%s is recorded as retained", c.Subject)
		}
	})
})

func mustParse(pemText string) []*x509.Certificate {
	certs, err := bundle.ParsePEM([]byte(pemText))
	Expect(err).NotTo(HaveOccurred())
	return certs
}
