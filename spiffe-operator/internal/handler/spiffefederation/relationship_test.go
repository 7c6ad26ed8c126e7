package spiffefederation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// newCA returns a self-signed CA certificate and its key.
func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	return selfSigned(t, func(*x509.Certificate) {})
}

func spec(mut func(*v1alpha1.SpiffeFederationSpec)) *v1alpha1.SpiffeFederationSpec {
	s := &v1alpha1.SpiffeFederationSpec{TrustDomain: "partner.test", BundleEndpointURL: "https://bundle.partner.test",
		BundleEndpointProfile: v1alpha1.ProfileHTTPSSPIFFE, EndpointSPIFFEID: "spiffe://partner.test/spire/server"}
	if mut != nil {
		mut(s)
	}
	return s
}

func TestBuildReadsBothBundleForms(t *testing.T) {
	cert, key := newCA(t)
	td := spiffeid.RequireTrustDomainFromString("partner.test")
	sb := spiffebundle.New(td)
	sb.AddX509Authority(cert)
	if err := sb.AddJWTAuthority("key-1", key.Public()); err != nil {
		t.Fatal(err)
	}
	sb.SetRefreshHint(5 * time.Minute)
	sb.SetSequenceNumber(7)
	jsonBundle, err := sb.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	pemBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})

	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = string(jsonBundle) }), "example.org")
	if fe != nil {
		t.Fatalf("JSON bundle: %v", fe)
	}
	b := d.bundle
	if len(b.X509Authorities) != 1 || !bytes.Equal(b.X509Authorities[0].Asn1, cert.Raw) {
		t.Errorf("JSON bundle: X.509 authorities %v, want the CA", b.X509Authorities)
	}
	wantKey, _ := x509.MarshalPKIXPublicKey(key.Public())
	if len(b.JwtAuthorities) != 1 || b.JwtAuthorities[0].KeyId != "key-1" || !bytes.Equal(b.JwtAuthorities[0].PublicKey, wantKey) {
		t.Errorf("JSON bundle: JWT authorities %v, want key-1", b.JwtAuthorities)
	}
	if b.RefreshHint != 300 || b.SequenceNumber != 7 || b.TrustDomain != "partner.test" {
		t.Errorf("JSON bundle: hint %d, sequence %d, trust domain %q", b.RefreshHint, b.SequenceNumber, b.TrustDomain)
	}

	d2, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = string(pemBundle) }), "example.org")
	if fe != nil {
		t.Fatalf("PEM bundle: %v", fe)
	}
	if len(d2.bundle.X509Authorities) != 1 || !bytes.Equal(d2.bundle.X509Authorities[0].Asn1, cert.Raw) || len(d2.bundle.JwtAuthorities) != 0 {
		t.Errorf("PEM bundle: %v, want the CA alone", d2.bundle)
	}
	if d.bundleSHA256 == "" || d.bundleSHA256 == d2.bundleSHA256 {
		t.Errorf("bundle digests %q and %q, want two different ones", d.bundleSHA256, d2.bundleSHA256)
	}
}

func TestBuildRefusesBadInputNamingTheField(t *testing.T) {
	cases := map[string]struct {
		mut           func(*v1alpha1.SpiffeFederationSpec)
		reason, field string
	}{
		"own trust domain": {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomain = "example.org" }, ReasonInvalidTrustDomain, "spec.trustDomain"},
		"bad trust domain": {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomain = "Not Valid" }, ReasonInvalidTrustDomain, "spec.trustDomain"},
		"http":             {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "http://bundle.partner.test" }, ReasonInvalidBundleEndpointURL, "spec.bundleEndpointURL"},
		"no host":          {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "https:///x" }, ReasonInvalidBundleEndpointURL, "spec.bundleEndpointURL"},
		"user info":        {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "https://u@bundle.partner.test" }, ReasonInvalidBundleEndpointURL, "spec.bundleEndpointURL"},
		"unparseable":      {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointURL = "https://%zz" }, ReasonInvalidBundleEndpointURL, "spec.bundleEndpointURL"},
		"spiffe without endpoint": {func(s *v1alpha1.SpiffeFederationSpec) { s.EndpointSPIFFEID = "" },
			ReasonInvalidEndpointSPIFFEID, "spec.endpointSPIFFEID"},
		"web with endpoint": {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointProfile = v1alpha1.ProfileHTTPSWeb },
			ReasonInvalidEndpointSPIFFEID, "spec.endpointSPIFFEID"},
		"unknown profile": {func(s *v1alpha1.SpiffeFederationSpec) { s.BundleEndpointProfile = "https_none" }, ReasonInvalidProfile, "spec.bundleEndpointProfile"},
		"text bundle":     {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = "hello" }, ReasonInvalidTrustDomainBundle, "spec.trustDomainBundle"},
		"broken PEM": {func(s *v1alpha1.SpiffeFederationSpec) {
			s.TrustDomainBundle = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
		}, ReasonInvalidTrustDomainBundle, "spec.trustDomainBundle"},
		"broken JSON":  {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = `{"keys": [` }, ReasonInvalidTrustDomainBundle, "spec.trustDomainBundle"},
		"empty bundle": {func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = `{"keys": []}` }, ReasonInvalidTrustDomainBundle, "spec.trustDomainBundle"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, fe := build(spec(tc.mut), "example.org")
			if fe == nil {
				t.Fatalf("built %v, want %s", d.relationship, tc.reason)
			}
			if fe.reason != tc.reason || fe.field != tc.field {
				t.Errorf("got %s on %s (%v), want %s on %s", fe.reason, fe.field, fe, tc.reason, tc.field)
			}
		})
	}
}
