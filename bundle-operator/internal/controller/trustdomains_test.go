package controller_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// setFederatedBundle makes SPIRE hold ca as the bundle of trust domain td
// (`spire-server bundle set`), as federation would.
func setFederatedBundle(ctx context.Context, td string, ca testpki.CA) {
	path := filepath.Join(spireSrv.Dir, td+".pem")
	Expect(os.WriteFile(path, []byte(ca.PEM()), 0o600)).To(Succeed())
	out, err := spireSrv.CLI(ctx, "bundle", "set", "-id", "spiffe://"+td, "-path", path)
	Expect(err).NotTo(HaveOccurred(), out)
}

// spiffeDocument reads the SPIFFE bundle of td from key of ConfigMap ns/ca.
func spiffeDocument(ctx context.Context, ns, key, td string) *spiffebundle.Bundle {
	raw := keyData(ctx, ns, "ca", key)
	Expect(raw).NotTo(BeEmpty(), "key %s of %s/ca", key, ns)
	doc, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString(td), []byte(raw))
	Expect(err).NotTo(HaveOccurred())
	return doc
}

// mintedSVID mints a real X509-SVID for id with the local SPIRE server.
func mintedSVID(ctx context.Context, id string) []*x509.Certificate {
	dir, err := spireSrv.MintX509SVID(ctx, id)
	Expect(err).NotTo(HaveOccurred())
	raw, err := os.ReadFile(filepath.Join(dir, "svid.pem"))
	Expect(err).NotTo(HaveOccurred())
	chain, err := bundle.ParsePEM(raw)
	Expect(err).NotTo(HaveOccurred())
	return chain
}

var _ = Describe("The SPIFFE format of the local trust domain", func() {
	It("does not verify an SVID of the local trust domain signed by a federated domain's CA or another source's CA; a real SVID verifies", func(ctx context.Context) {
		fedTD := unique("fed") + ".test"
		fedCA, inlineCA := testpki.ValidCA(fedTD), testpki.ValidCA("inline")
		setFederatedBundle(ctx, fedTD, fedCA)

		group := unique("g")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group,
			v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{fedTD}}},
			inline(inlineCA.PEM()))
		tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe"}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		local := spiffeDocument(ctx, ns, "bundle.spiffe", "example.org")
		for name, ca := range map[string]testpki.CA{"federated": fedCA, "inline": inlineCA} {
			forged := ca.Leaf("spiffe://example.org/admin")
			_, _, err := x509svid.Verify([]*x509.Certificate{forged}, local)
			Expect(err).To(HaveOccurred(), "an SVID for spiffe://example.org/admin signed by the %s CA verifies against the example.org bundle", name)
		}
		_, _, err := x509svid.Verify(mintedSVID(ctx, "spiffe://example.org/admin"), local)
		Expect(err).NotTo(HaveOccurred(), "a real SVID of the local SPIRE server")

		By("publishing the federated trust domain as its own document")
		localDoc := keyData(ctx, ns, "ca", "bundle.spiffe")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Target.ConfigMap.Keys.FederatedSPIFFE = "federated." })
		Eventually(func() string { return keyData(ctx, ns, "ca", "federated."+fedTD) }).ShouldNot(BeEmpty())
		fed := spiffeDocument(ctx, ns, "federated."+fedTD, fedTD)
		Expect(fed.X509Authorities()).To(HaveLen(1))
		Expect(fed.X509Authorities()[0].Equal(fedCA.Cert)).To(BeTrue())
		_, _, err = x509svid.Verify([]*x509.Certificate{fedCA.Leaf("spiffe://" + fedTD + "/w")}, fed)
		Expect(err).NotTo(HaveOccurred(), "an SVID of the federated trust domain against its own document")
		_, _, err = x509svid.Verify(mintedSVID(ctx, "spiffe://example.org/w"), fed)
		Expect(err).To(HaveOccurred(), "a local SVID against the federated document")
		Expect(keyData(ctx, ns, "ca", "bundle.spiffe")).To(Equal(localDoc), "the local document is unchanged")
	})
})

var _ = Describe("Who decides trust", func() {
	It("refuses a ConfigMap source outside the allowed namespaces and writes nothing from it", func(ctx context.Context) {
		group := unique("ns-allow")
		tenantNS := newNamespace(ctx, nil)
		ns := newNamespace(ctx, map[string]string{"group": group})
		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "evil", Namespace: tenantNS}, Data: map[string]string{"pem": testpki.ValidCA("evil").PEM()}}
		Expect(cp.Client.Create(ctx, src)).To(Succeed())
		tb := newTrustBundle(group, v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: tenantNS, Name: "evil", Key: "pem"}})
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(source.ReasonNamespaceNotAllowed))
		Expect(conditionMessage(ctx, tb, "Ready")).To(ContainSubstring(tenantNS))
		Consistently(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }).Should(BeNil())
	})

	It("refuses a spec.trustDomain other than SPIRE's with TrustDomainMismatch and writes nothing", func(ctx context.Context) {
		group := unique("td")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		tb.Spec.TrustDomain = "not-example.org"
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(source.ReasonTrustDomainMismatch))
		Consistently(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }).Should(BeNil())

		By("after the trust domain is corrected, it publishes")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.TrustDomain = "example.org" })
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Expect(caData(ctx, ns)).NotTo(BeEmpty())

		By("a mismatch after a bundle was published gives a new namespace nothing either")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.TrustDomain = "not-example.org" })
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(source.ReasonTrustDomainMismatch))
		late := newNamespace(ctx, map[string]string{"group": group})
		Consistently(func() *corev1.ConfigMap { return configMap(ctx, late, "ca") }).Should(BeNil())
	})

	It("refuses a source holding a certificate that is not a CA, or drops it with dropNonCA; caCount counts CAs", func(ctx context.Context) {
		group := unique("leaf")
		ns := newNamespace(ctx, map[string]string{"group": group})
		ca := testpki.ValidCA("leaf-ca")
		leaf := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Leaf("spiffe://example.org/pinned").Raw}))
		tb := newTrustBundle(group, inline(ca.PEM(), leaf))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonNotCA))
		Expect(caData(ctx, ns)).To(BeEmpty())

		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Options.DropNonCA = true })
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(ca.PEM()))
		Eventually(func() int32 { return get(ctx, tb).Status.CACount }).Should(BeEquivalentTo(1))
	})
})

var _ = Describe("A publicRoots source", func() {
	It("publishes the public root set beside the other sources and records its version", func(ctx context.Context) {
		group := unique("public")
		ns := newNamespace(ctx, map[string]string{"group": group})
		own := testpki.ValidCA("own")
		tb := newTrustBundle(group, v1alpha1.Source{PublicRoots: &v1alpha1.PublicRootsSource{}}, inline(own.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		res, err := (&source.Resolver{}).Resolve(ctx, &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{PublicRoots: &v1alpha1.PublicRootsSource{}}}})
		Expect(err).NotTo(HaveOccurred())
		published, err := bundle.ParsePEM([]byte(caData(ctx, ns)))
		Expect(err).NotTo(HaveOccurred())
		Expect(published).To(HaveLen(len(res.Certificates) + 1))
		cur := get(ctx, tb)
		Expect(cur.Status.PublicRoots).To(Equal(source.PublicRootsVersion))
		Expect(cur.Status.CACount).To(BeEquivalentTo(len(res.Certificates) + 1))
	})
})
