package spiffefederation

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// certificate returns a self-signed certificate shaped by mut: a CA valid
// for the next hour unless mut says otherwise.
func certificate(t *testing.T, mut func(*x509.Certificate)) *x509.Certificate {
	t.Helper()
	cert, _ := selfSigned(t, mut)
	return cert
}

// spiffeBundleOf returns a SPIFFE bundle document of partner.test with certs
// as its X.509 authorities.
func spiffeBundleOf(t *testing.T, certs ...*x509.Certificate) string {
	t.Helper()
	b := spiffebundle.New(spiffeid.RequireTrustDomainFromString("partner.test"))
	for _, c := range certs {
		b.AddX509Authority(c)
	}
	doc, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// TestAdversarialAStartBundleThatIsNoAuthorityIsRefused: the start bundle
// is SPIRE's trust in the foreign domain until its endpoint answers, and
// SPIRE hands it to every workload that federates with the domain. A
// leaf in it (CA:FALSE, no basic constraints, or a key usage without
// keyCertSign) is no authority: a paste of one peer's certificate, or an
// attempt to pin one. bundle-operator refuses such a certificate in any
// bundle; the start bundle is held to the same rule, in both forms.
func TestAdversarialAStartBundleThatIsNoAuthorityIsRefused(t *testing.T) {
	ca := certificate(t, func(*x509.Certificate) {})
	leaves := map[string]*x509.Certificate{
		"CA:FALSE":                  certificate(t, func(c *x509.Certificate) { c.IsCA = false; c.KeyUsage = x509.KeyUsageDigitalSignature }),
		"no basic constraints":      certificate(t, func(c *x509.Certificate) { c.IsCA, c.BasicConstraintsValid = false, false }),
		"key usage without signing": certificate(t, func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }),
	}
	for name, leaf := range leaves {
		for form, text := range map[string]string{"PEM": pemOf(ca) + pemOf(leaf), "SPIFFE bundle": spiffeBundleOf(t, ca, leaf)} {
			d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = text }), "example.org")
			switch {
			case fe == nil:
				t.Errorf("%s, %s: a start bundle holding a certificate that is no CA was accepted with %d X.509 authorities", name, form, len(d.bundle.X509Authorities))
			case fe.reason != ReasonInvalidTrustDomainBundle || !strings.Contains(fe.Error(), "not a CA"):
				t.Errorf("%s, %s: refused as %s %q; want %s naming the certificate that is not a CA", name, form, fe.reason, fe.Error(), ReasonInvalidTrustDomainBundle)
			}
		}
	}
}

// TestAdversarialAnHTTPSSPIFFEStartBundleWithoutX509AuthorityIsRefused:
// with https_spiffe, SPIRE authenticates the bundle endpoint with the start
// bundle's X.509 authorities. A bundle of JWT keys only can authenticate
// nothing, so the relationship would never refresh and the domain would be
// trusted for JWTs alone, for ever. With https_web (web PKI authenticates
// the endpoint) such a bundle is accepted.
func TestAdversarialAnHTTPSSPIFFEStartBundleWithoutX509AuthorityIsRefused(t *testing.T) {
	_, key := newCA(t)
	b := spiffebundle.New(spiffeid.RequireTrustDomainFromString("partner.test"))
	if err := b.AddJWTAuthority("key-1", key.Public()); err != nil {
		t.Fatal(err)
	}
	doc, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = string(doc) }), "example.org")
	if fe == nil {
		t.Errorf("an https_spiffe start bundle of JWT authorities only was accepted (%d JWT authorities)", len(d.bundle.JwtAuthorities))
	} else if fe.reason != ReasonInvalidTrustDomainBundle {
		t.Errorf("refused as %s; want %s", fe.reason, ReasonInvalidTrustDomainBundle)
	}
	_, fe = build(spec(func(s *v1alpha1.SpiffeFederationSpec) {
		s.TrustDomainBundle, s.BundleEndpointProfile, s.EndpointSPIFFEID = string(doc), v1alpha1.ProfileHTTPSWeb, ""
	}), "example.org")
	if fe != nil {
		t.Errorf("an https_web start bundle of JWT authorities only was refused: %v", fe)
	}
}

// TestAdversarialAStartBundleWithNoCAValidNowIsNotWritten: a start bundle
// whose X.509 authorities have all expired (or are not valid yet) breaks
// every handshake with the domain, and with https_spiffe the endpoint
// itself, from the moment SPIRE holds it. It is refused when it would be
// written; one valid CA beside an expired one is enough.
func TestAdversarialAStartBundleWithNoCAValidNowIsNotWritten(t *testing.T) {
	now := time.Now()
	expired := certificate(t, func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour) })
	future := certificate(t, func(c *x509.Certificate) { c.NotBefore, c.NotAfter = now.Add(time.Hour), now.Add(2*time.Hour) })
	valid := certificate(t, func(*x509.Certificate) {})
	for name, text := range map[string]string{"expired": pemOf(expired), "not yet valid": pemOf(future), "both": pemOf(expired) + pemOf(future)} {
		d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = text }), "example.org")
		if fe != nil {
			t.Errorf("%s: refused by build (%v); the validity period is judged when the bundle is written, not in every pass", name, fe)
			continue
		}
		if err := d.writableAt(now); err == nil {
			t.Errorf("%s: a start bundle with no CA valid now would be written to SPIRE", name)
		} else if !strings.Contains(err.Error(), "valid") {
			t.Errorf("%s: the refusal %q does not say that no CA is valid now", name, err)
		}
	}
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = pemOf(expired) + pemOf(valid) }), "example.org")
	if fe != nil {
		t.Fatalf("an expired and a valid CA: %v", fe)
	}
	if err := d.writableAt(now); err != nil {
		t.Errorf("a start bundle with one CA valid now was refused: %v", err)
	}
}
