package operator_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	trustdomainv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/trustdomain/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spiffefederation"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// federation returns a SpiffeFederation for td with the https_web profile
// and a bundle endpoint URL of its own.
func federation(name, td string, mut func(*v1alpha1.SpiffeFederationSpec)) *v1alpha1.SpiffeFederation {
	f := &v1alpha1.SpiffeFederation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SpiffeFederationSpec{
			TrustDomain:           v1alpha1.TrustDomainName(td),
			BundleEndpointURL:     "https://bundle." + td + "/" + name,
			BundleEndpointProfile: v1alpha1.ProfileHTTPSWeb,
		},
	}
	if mut != nil {
		mut(&f.Spec)
	}
	return f
}

// federations reads SPIRE's relationships through its TrustDomain API.
func federations() *spire.FederationClient {
	return spire.NewFederationClient(spireConn, spire.Options{})
}

// relationship returns SPIRE's relationship for td, nil when none.
func relationship(td string) *types.FederationRelationship {
	GinkgoHelper()
	r, err := federations().Get(ctx, td)
	Expect(err).NotTo(HaveOccurred())
	return r
}

// endpointOf returns the bundle endpoint URL of SPIRE's relationship for
// td, empty when there is none.
func endpointOf(td string) func() string {
	return func() string { return relationship(td).GetBundleEndpointUrl() }
}

func federationReady(f *v1alpha1.SpiffeFederation) func() string {
	return readyOf(f, func() []metav1.Condition { return f.Status.Conditions })
}

// conflictOf returns the status and reason of the Conflict condition of a
// fresh copy of f.
func conflictOf(f *v1alpha1.SpiffeFederation) func() string {
	return func() string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), f); err != nil {
			return "get: " + err.Error()
		}
		c := meta.FindStatusCondition(f.Status.Conditions, spiffefederation.TypeConflict)
		if c == nil {
			return ""
		}
		return string(c.Status) + "/" + c.Reason
	}
}

// gone reports whether obj no longer exists.
func gone(obj client.Object) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj))
	}
}

// caPEM returns a fresh self-signed CA certificate in PEM and its DER.
func caPEM(cn string) (string, []byte) {
	GinkgoHelper()
	return certPEM(cn, func(*x509.Certificate) {})
}

// certPEM returns a fresh self-signed certificate, a CA valid for the next
// hour unless mut says otherwise, in PEM and its DER.
func certPEM(cn string, mut func(*x509.Certificate)) (string, []byte) {
	GinkgoHelper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	mut(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	Expect(err).NotTo(HaveOccurred())
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), der
}

// pemDER returns the first PEM block of s and its bytes.
func pemDER(s string) (*pem.Block, []byte) {
	GinkgoHelper()
	b, _ := pem.Decode([]byte(s))
	Expect(b).NotTo(BeNil())
	return b, b.Bytes
}

// authorities returns the DER X.509 authorities of r's bundle.
func authorities(b *types.Bundle) [][]byte {
	var out [][]byte
	for _, a := range b.GetX509Authorities() {
		out = append(out, a.Asn1)
	}
	return out
}

var _ = Describe("SpiffeFederation", func() {
	It("creates the relationship with its bundle, follows spec changes, and deletes exactly it", func() {
		bundle, der := caPEM("life.test CA")
		other := &types.FederationRelationship{TrustDomain: "life-bystander.test", BundleEndpointUrl: "https://bystander.test",
			BundleEndpointProfile: &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}}
		Expect(federations().Create(ctx, other)).To(Succeed())

		f := federation("life", "life.test", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = bundle })
		Expect(k8s.Create(ctx, f)).To(Succeed())
		Eventually(federationReady(f)).Should(Equal("True/Ready"))
		r := relationship("life.test")
		Expect(r.GetBundleEndpointUrl()).To(Equal("https://bundle.life.test/life"))
		Expect(r.GetHttpsWeb()).NotTo(BeNil())
		Expect(authorities(r.GetTrustDomainBundle())).To(Equal([][]byte{der}))
		Expect(f.Status.RelationshipTrustDomain).To(Equal("life.test"))

		By("a changed URL and profile are written")
		patch := client.MergeFrom(f.DeepCopy())
		f.Spec.BundleEndpointURL = "https://bundle.life.test/moved"
		f.Spec.BundleEndpointProfile = v1alpha1.ProfileHTTPSSPIFFE
		f.Spec.EndpointSPIFFEID = "spiffe://life.test/spire/server"
		Expect(k8s.Patch(ctx, f, patch)).To(Succeed())
		Eventually(func() string {
			r := relationship("life.test")
			return r.GetBundleEndpointUrl() + " " + r.GetHttpsSpiffe().GetEndpointSpiffeId()
		}).Should(Equal("https://bundle.life.test/moved spiffe://life.test/spire/server"))

		By("deleting the object deletes its relationship and no other")
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
		Expect(relationship("life.test")).To(BeNil())
		Expect(relationship("life-bystander.test")).NotTo(BeNil())
	})

	It("makes a held relationship deleted in SPIRE again after its start bundle expired", func() {
		notAfter := time.Now().Add(5 * time.Second)
		bundle, _ := certPEM("shortlived.test CA", func(c *x509.Certificate) { c.NotAfter = notAfter })
		f := federation("shortlived", "shortlived.test", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = bundle })
		Expect(k8s.Create(ctx, f)).To(Succeed())
		Eventually(federationReady(f)).Should(Equal("True/Ready"))
		Expect(relationship("shortlived.test")).NotTo(BeNil())

		By("the start bundle expires and someone deletes the relationship in SPIRE")
		Eventually(func() bool { return time.Now().After(notAfter.Add(time.Second)) }).WithTimeout(15 * time.Second).Should(BeTrue())
		Expect(federations().Delete(ctx, "shortlived.test")).To(Succeed())
		patch := client.MergeFrom(f.DeepCopy())
		f.Annotations = map[string]string{"example.test/touched": "yes"}
		Expect(k8s.Patch(ctx, f, patch)).To(Succeed())

		By("the object makes it again, without the expired bundle, and stays Ready")
		Eventually(endpointOf("shortlived.test")).Should(Equal("https://bundle.shortlived.test/shortlived"))
		Consistently(federationReady(f), 2*time.Second).Should(Equal("True/Ready"))
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
		Expect(relationship("shortlived.test")).To(BeNil())
	})

	It("neither overwrites nor deletes a relationship it did not create", func() {
		foreign := &types.FederationRelationship{TrustDomain: "foreign.test", BundleEndpointUrl: "https://by-hand.foreign.test",
			BundleEndpointProfile: &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}}
		Expect(federations().Create(ctx, foreign)).To(Succeed())

		f := federation("foreign", "foreign.test", nil)
		Expect(k8s.Create(ctx, f)).To(Succeed())
		Eventually(conflictOf(f)).Should(Equal("True/" + spiffefederation.ReasonForeignRelationship))
		Expect(federationReady(f)()).To(Equal("False/" + spiffefederation.ReasonForeignRelationship))
		Expect(f.Status.RelationshipTrustDomain).To(BeEmpty())
		Consistently(endpointOf("foreign.test")).Should(Equal("https://by-hand.foreign.test"))

		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
		Consistently(endpointOf("foreign.test")).Should(Equal("https://by-hand.foreign.test"))
	})

	It("takes over a foreign relationship only once it is deleted in SPIRE", func() {
		foreign := &types.FederationRelationship{TrustDomain: "takeover.test", BundleEndpointUrl: "https://by-hand.takeover.test",
			BundleEndpointProfile: &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}}
		Expect(federations().Create(ctx, foreign)).To(Succeed())
		f := federation("takeover", "takeover.test", nil)
		Expect(k8s.Create(ctx, f)).To(Succeed())
		Eventually(conflictOf(f)).Should(Equal("True/" + spiffefederation.ReasonForeignRelationship))

		Expect(federations().Delete(ctx, "takeover.test")).To(Succeed())
		Eventually(endpointOf("takeover.test")).Should(Equal("https://bundle.takeover.test/takeover"))
		Eventually(federationReady(f)).Should(Equal("True/Ready"))
		Expect(conflictOf(f)()).To(BeEmpty())
	})

	It("leaves a relationship made by someone else between its claim and its create alone", func() {
		f := federation("claimrace", "claimrace.test", nil)
		foreign := &types.FederationRelationship{TrustDomain: "claimrace.test", BundleEndpointUrl: "https://by-hand.claimrace.test",
			BundleEndpointProfile: &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}}
		whileOperatorDown(func() {
			Expect(k8s.Create(ctx, f)).To(Succeed())
			f.Status.ClaimedTrustDomain = "claimrace.test"
			Expect(k8s.Status().Update(ctx, f)).To(Succeed())
			Expect(federations().Create(ctx, foreign)).To(Succeed())
		})
		Eventually(conflictOf(f)).Should(Equal("True/" + spiffefederation.ReasonForeignRelationship))
		Expect(f.Status.ClaimedTrustDomain).To(BeEmpty())
		Expect(f.Status.RelationshipTrustDomain).To(BeEmpty())
		Consistently(endpointOf("claimrace.test")).Should(Equal("https://by-hand.claimrace.test"))
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
		Expect(endpointOf("claimrace.test")()).To(Equal("https://by-hand.claimrace.test"))
	})

	It("recognises the relationship it created when the operator stopped before recording it", func() {
		bundle, _ := caPEM("lost.test CA")
		f := federation("lostrecord", "lost.test", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = bundle })
		whileOperatorDown(func() {
			Expect(k8s.Create(ctx, f)).To(Succeed())
			f.Status.ClaimedTrustDomain = "lost.test"
			Expect(k8s.Status().Update(ctx, f)).To(Succeed())
			// What the create of the stopped operator made.
			r := &types.FederationRelationship{TrustDomain: "lost.test", BundleEndpointUrl: f.Spec.BundleEndpointURL,
				BundleEndpointProfile: &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}}
			_, der := pemDER(bundle)
			r.TrustDomainBundle = &types.Bundle{TrustDomain: "lost.test", X509Authorities: []*types.X509Certificate{{Asn1: der}}}
			Expect(federations().Create(ctx, r)).To(Succeed())
		})
		Eventually(federationReady(f)).Should(Equal("True/Ready"))
		Expect(f.Status.RelationshipTrustDomain).To(Equal("lost.test"))
		Expect(f.Status.ClaimedTrustDomain).To(BeEmpty())
		Expect(op.Federation.Writes()).To(BeZero())
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
		Expect(relationship("lost.test")).To(BeNil())
	})

	It("gives the younger of two objects naming one trust domain a steady conflict, and hands over when the older goes", func() {
		older := federation("twin-older", "twin.test", nil)
		Expect(k8s.Create(ctx, older)).To(Succeed())
		Eventually(federationReady(older)).Should(Equal("True/Ready"))
		younger := federation("twin-younger", "twin.test", nil)
		Expect(k8s.Create(ctx, younger)).To(Succeed())
		Eventually(conflictOf(younger)).Should(Equal("True/" + spiffefederation.ReasonTrustDomainTaken))
		Expect(younger.Status.RelationshipTrustDomain).To(BeEmpty())

		By("a resync of both changes nothing")
		rv := younger.ResourceVersion
		Consistently(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(younger), younger)).To(Succeed())
			return younger.ResourceVersion + " " + federationReady(older)() + " " + endpointOf("twin.test")()
		}, 2*resync).Should(Equal(rv + " True/Ready https://bundle.twin.test/twin-older"))

		By("deleting the older hands the trust domain to the younger")
		Expect(k8s.Delete(ctx, older)).To(Succeed())
		Eventually(endpointOf("twin.test")).Should(Equal("https://bundle.twin.test/twin-younger"))
		Eventually(federationReady(younger)).Should(Equal("True/Ready"))
		Expect(conflictOf(younger)()).To(BeEmpty())
	})

	It("refuses bad input at admission", func() {
		for name, mut := range map[string]func(*v1alpha1.SpiffeFederationSpec){
			"http URL":                      func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "http://bundle.bad.test" },
			"URL without host":              func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "https:///path" },
			"not a URL":                     func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "bundle endpoint" },
			"https_spiffe without endpoint": func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointProfile = v1alpha1.ProfileHTTPSSPIFFE },
			"https_web with endpoint":       func(s *v1alpha1.SpiffeFederationSpec) { s.EndpointSPIFFEID = "spiffe://bad.test/spire/server" },
			"unknown profile":               func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointProfile = "https_none" },
			"bad trust domain":              func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomain = "Bad Domain" },
		} {
			err := k8s.Create(ctx, federation("admission", "bad.test", mut))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		}

		f := federation("immutable", "immutable.test", nil)
		Expect(k8s.Create(ctx, f)).To(Succeed())
		patch := client.MergeFrom(f.DeepCopy())
		f.Spec.TrustDomain = "other.test"
		err := k8s.Patch(ctx, f, patch)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("trustDomain is immutable"))
		Expect(k8s.Delete(ctx, f)).To(Succeed())
	})

	It("reports input only the operator can judge in a condition and writes nothing", func() {
		leaf, _ := certPEM("a peer", func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
		expired, _ := certPEM("an old CA", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		})
		jwks := `{"keys":[{"kty":"EC","use":"x509-svid","crv":"P-256","x":"AAAA","y":"BBBB","x5c":["bm90IGEgY2VydA=="]}]}`
		for name, c := range map[string]struct {
			mut    func(*v1alpha1.SpiffeFederationSpec)
			reason string
		}{
			"own trust domain": {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomain = trustDomain }, spiffefederation.ReasonInvalidTrustDomain},
			"bad PEM": {func(s *v1alpha1.SpiffeFederationSpec) {
				s.TrustDomainBundle = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
			}, spiffefederation.ReasonInvalidTrustDomainBundle},
			"text":                       {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = "not a bundle" }, spiffefederation.ReasonInvalidTrustDomainBundle},
			"bad bundle JSON":            {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = jwks }, spiffefederation.ReasonInvalidTrustDomainBundle},
			"empty JWKS":                 {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = `{"keys":[]}` }, spiffefederation.ReasonInvalidTrustDomainBundle},
			"a leaf in the start bundle": {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = leaf }, spiffefederation.ReasonInvalidTrustDomainBundle},
			"an expired start bundle":    {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = expired }, spiffefederation.ReasonInvalidTrustDomainBundle},
			"URL with a user:":           {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "https://user:pw@bundle.test" }, spiffefederation.ReasonInvalidBundleEndpointURL},
		} {
			name := "badinput-" + strings.ToLower(strings.NewReplacer(" ", "-", ":", "").Replace(name))
			f := federation(name, name+".test", c.mut)
			Expect(k8s.Create(ctx, f)).To(Succeed(), name)
			Eventually(federationReady(f)).Should(Equal("False/"+c.reason), name)
			Expect(relationship(string(f.Spec.TrustDomain))).To(BeNil(), name)
			Expect(f.Status.RelationshipTrustDomain).To(BeEmpty(), name)
			Expect(k8s.Delete(ctx, f)).To(Succeed())
		}
	})

	It("writes nothing to SPIRE and nothing to the object after a restart", func() {
		bundle, _ := caPEM("restart.test CA")
		f := federation("restart", "restart.test", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = bundle })
		Expect(k8s.Create(ctx, f)).To(Succeed())
		Eventually(federationReady(f)).Should(Equal("True/Ready"))

		By("SPIRE's bundle for the trust domain changes, as a refresh from the endpoint would change it")
		_, fetched := caPEM("restart.test CA, fetched")
		r := relationship("restart.test")
		r.TrustDomainBundle = &types.Bundle{TrustDomain: "restart.test", X509Authorities: []*types.X509Certificate{{Asn1: fetched}}}
		Expect(federations().Update(ctx, r, &types.FederationRelationshipMask{TrustDomainBundle: true})).To(Succeed())

		whileOperatorDown(func() {})
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(f), f)).To(Succeed())
		rv := f.ResourceVersion
		Eventually(op.Federation.Reads).Should(BeNumerically(">", 0))
		Consistently(func() int64 { return op.Federation.Writes() }, 2*resync).Should(BeZero())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(f), f)).To(Succeed())
		Expect(f.ResourceVersion).To(Equal(rv))
		Expect(authorities(relationship("restart.test").GetTrustDomainBundle())).To(Equal([][]byte{fetched}))

		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
	})

	It("retries a policy's entries refused for want of a bundle as soon as a SpiffeFederation brings it, not at the next resync", func() {
		namespace("fedprompt-a", map[string]string{"test": "fedprompt"})
		deployment("fedprompt-a", "web", "web", nil)
		p := policyFor("fedprompt", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.FederatesWith = []v1alpha1.TrustDomainName{"prompt.test"}
		})
		bundle, _ := caPEM("prompt.test CA")
		f := federation("prompt", "prompt.test", func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = bundle })
		whileOperatorDown(func() {
			_, stop := launch(cp.Config, func(o *operator.Options) { o.Config.RequeueAfter = 10 * time.Minute })
			defer stop()
			Expect(k8s.Create(ctx, p)).To(Succeed())
			Eventually(policyReady(p)).Should(Equal("False/" + spifferegistration.ReasonFederatedBundleMissing))
			Expect(k8s.Create(ctx, f)).To(Succeed())
			Eventually(federationReady(f)).Should(Equal("True/Ready"))
			Eventually(policyReady(p)).Should(Equal("True/Ready"))
			Expect(entryAt(parentOf("fedprompt"), "/ns/fedprompt-a/sa/web").GetFederatesWith()).To(Equal([]string{"prompt.test"}))
		})
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
	})

	It("makes federatesWith of a policy work end to end, with a second SPIRE server as the federated trust domain", func() {
		By("without a relationship, the policy's condition says what to fix")
		namespace("fedwith-a", map[string]string{"test": "fedwith"})
		deployment("fedwith-a", "web", "web", nil)
		p := policyFor("fedwith", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.FederatesWith = []v1alpha1.TrustDomainName{"partner.test"}
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("False/" + spifferegistration.ReasonFederatedBundleMissing))
		ready := meta.FindStatusCondition(p.Status.Conditions, "Ready")
		Expect(ready.Message).To(ContainSubstring("partner.test"))
		Expect(ready.Message).To(ContainSubstring("SpiffeFederation"))
		Expect(entriesUnder(parentOf("fedwith"))).To(BeEmpty())

		By("a second SPIRE server serves its bundle")
		partner, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "partner.test", BundleEndpoint: true, LogLevel: "INFO"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(partner.Cleanup)
		partnerPEM, err := partner.BundlePEM(ctx)
		Expect(err).NotTo(HaveOccurred())

		f := federation("partner", "partner.test", func(s *v1alpha1.SpiffeFederationSpec) {
			s.BundleEndpointURL = partner.BundleEndpointURL
			s.BundleEndpointProfile = v1alpha1.ProfileHTTPSSPIFFE
			s.EndpointSPIFFEID = partner.ServerID
			s.TrustDomainBundle = partnerPEM
		})
		Expect(k8s.Create(ctx, f)).To(Succeed())
		Eventually(federationReady(f)).Should(Equal("True/Ready"))

		By("the policy's entries federate with the partner")
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Eventually(func() []string {
			if e := entryAt(parentOf("fedwith"), "/ns/fedwith-a/sa/web"); e != nil {
				return e.FederatesWith
			}
			return nil
		}).Should(Equal([]string{"partner.test"}))

		By("the first server fetches the partner's bundle from its endpoint")
		_, err = partner.CLI(ctx, testenv.LocalAuthorityArgs("prepare")...)
		Expect(err).NotTo(HaveOccurred())
		partnerBundle := func() [][]byte {
			b, err := bundlev1.NewBundleClient(mustDial(partner)).GetBundle(ctx, &bundlev1.GetBundleRequest{})
			Expect(err).NotTo(HaveOccurred())
			return authorities(b)
		}
		Expect(partnerBundle()).To(HaveLen(2))
		td := trustdomainv1.NewTrustDomainClient(spireConn)
		Eventually(func() [][]byte {
			_, err := td.RefreshBundle(ctx, &trustdomainv1.RefreshBundleRequest{TrustDomain: "partner.test"})
			Expect(err).NotTo(HaveOccurred())
			b, err := bundlev1.NewBundleClient(spireConn).GetFederatedBundle(ctx, &bundlev1.GetFederatedBundleRequest{TrustDomain: "partner.test"})
			Expect(err).NotTo(HaveOccurred())
			return authorities(b)
		}).Should(Equal(partnerBundle()))

		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Expect(k8s.Delete(ctx, f)).To(Succeed())
		Eventually(gone(f)).Should(BeTrue())
		Expect(relationship("partner.test")).To(BeNil())
	})
})

// mustDial connects to the admin API of s for the rest of the spec.
func mustDial(s *testenv.Spire) *grpc.ClientConn {
	GinkgoHelper()
	conn, err := s.Dial(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return conn
}
