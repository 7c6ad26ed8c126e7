package spiffefederation

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strconv"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// pemOf returns cert as a PEM block.
func pemOf(cert *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

// TestAdversarialAPEMStartBundleWithACorruptBlockIsNotWrittenPartially: the
// spec's trustDomainBundle is PEM whose first CERTIFICATE block is corrupt
// (bad base64) followed by a good one. go-spiffe's PEM reader (like
// encoding/pem) skips what it cannot decode, so the relationship would be
// written to SPIRE with only the second CA: a partial foreign bundle that
// SPIRE then serves to every workload federating with the domain.
// Expected safe behaviour: InvalidTrustDomainBundle, nothing built (as
// bundle-operator's ParsePEM refuses the whole input).
func TestAdversarialAPEMStartBundleWithACorruptBlockIsNotWrittenPartially(t *testing.T) {
	ca, _ := newCA(t)
	good := pemOf(ca)
	text := "-----BEGIN CERTIFICATE-----\nnot*base64*at*all\n-----END CERTIFICATE-----\n" + good
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = text }), "example.org")
	if fe == nil {
		t.Fatalf("a trustDomainBundle whose first block is corrupt was accepted with %d X.509 authorities (the corrupt one silently dropped)",
			len(d.bundle.X509Authorities))
	}
}

// TestAdversarialAPEMStartBundleWithAPrivateKeyIsRefused: the spec's PEM holds
// the foreign CA's private key beside its certificate (a paste mistake).
// Expected: refused (InvalidTrustDomainBundle) like bundle-operator's
// PrivateKeyInBundle, not silently accepted with the key skipped, which
// leaves the key in a cluster-scoped object and hides the mistake.
func TestAdversarialAPEMStartBundleWithAPrivateKeyIsRefused(t *testing.T) {
	ca, key := newCA(t)
	good := pemOf(ca)
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	text := good + string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = text }), "example.org")
	if fe == nil {
		t.Fatalf("a trustDomainBundle holding an EC PRIVATE KEY block was accepted (%d X.509 authorities)", len(d.bundle.X509Authorities))
	}
}

// TestAdversarialARefreshHintOutOfRangeIsRefused: a SPIFFE bundle whose
// spiffe_refresh_hint is negative, or so large that seconds overflow a
// time.Duration (go-spiffe multiplies it by time.Second unchecked), is
// refused rather than written to SPIRE wrapped; one in range is written as
// given.
func TestAdversarialARefreshHintOutOfRangeIsRefused(t *testing.T) {
	cert, _ := newCA(t)
	doc := func(hint int64) string {
		pub := cert.PublicKey.(*ecdsa.PublicKey)
		return `{"spiffe_refresh_hint": ` + strconv.FormatInt(hint, 10) + `, "keys": [{"use":"x509-svid","kty":"EC","crv":"P-256","x":"` +
			base64.RawURLEncoding.EncodeToString(pub.X.FillBytes(make([]byte, 32))) + `","y":"` +
			base64.RawURLEncoding.EncodeToString(pub.Y.FillBytes(make([]byte, 32))) + `","x5c":["` +
			base64.StdEncoding.EncodeToString(cert.Raw) + `"]}]}`
	}
	for _, hint := range []int64{-600, 1 << 62} {
		if d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc(hint) }), "example.org"); fe == nil {
			t.Errorf("spiffe_refresh_hint %d was accepted and would be written to SPIRE as %d", hint, d.bundle.RefreshHint)
		}
	}
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) { s.TrustDomainBundle = doc(600) }), "example.org")
	if fe != nil || d.bundle.RefreshHint != 600 {
		t.Errorf("spiffe_refresh_hint 600: %v, written as %d; want 600", fe, d.bundle.RefreshHint)
	}
}

// TestAdversarialTheServersOwnTrustDomainWithATrailingDotIsRefused: the SPIRE
// server's trust domain is example.org; a SpiffeFederation names
// "example.org." (admission's pattern ^[a-z0-9._-]+$ lets it through). As
// a DNS name it is the local domain; SPIRE would hold an outside endpoint's
// bundle under a name that tools normalising DNS names read as the local
// trust domain. Expected: InvalidTrustDomain like "example.org".
func TestAdversarialTheServersOwnTrustDomainWithATrailingDotIsRefused(t *testing.T) {
	d, fe := build(spec(func(s *v1alpha1.SpiffeFederationSpec) {
		s.TrustDomain = "example.org."
		s.EndpointSPIFFEID = "spiffe://example.org./spire/server"
	}), "example.org")
	if fe == nil {
		t.Fatalf("a federation relationship for %q was built while the server's trust domain is example.org", d.relationship.TrustDomain)
	}
}
