package x509ca_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/x509ca"
)

// selfSigned returns a self-signed certificate from tmpl.
func selfSigned(t *testing.T, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.Subject = big.NewInt(1), pkix.Name{CommonName: "x"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestIsCA checks every combination of basic constraints and key usage
// against the rule written out independently: CA:TRUE, and keyCertSign
// whenever a key usage is present.
func TestIsCA(t *testing.T) {
	usages := map[string]x509.KeyUsage{
		"no key usage":          0,
		"keyCertSign":           x509.KeyUsageCertSign,
		"digitalSignature only": x509.KeyUsageDigitalSignature,
		"both":                  x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	for _, bc := range []struct {
		name        string
		valid, isCA bool
	}{{"no basic constraints", false, false}, {"CA:FALSE", true, false}, {"CA:TRUE", true, true}} {
		for uname, usage := range usages {
			cert := selfSigned(t, &x509.Certificate{BasicConstraintsValid: bc.valid, IsCA: bc.isCA, KeyUsage: usage,
				NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)})
			want := bc.isCA && (usage == 0 || usage&x509.KeyUsageCertSign != 0)
			if got := x509ca.IsCA(cert); got != want {
				t.Errorf("%s, %s: IsCA = %v, want %v", bc.name, uname, got, want)
			}
		}
	}
}

// TestValidAt checks both ends of the validity period are included.
func TestValidAt(t *testing.T) {
	start := time.Now().Truncate(time.Second).Add(-time.Hour)
	cert := selfSigned(t, &x509.Certificate{NotBefore: start, NotAfter: start.Add(time.Hour)})
	for at, want := range map[time.Time]bool{
		start.Add(-time.Second):            false,
		start:                              true,
		start.Add(30 * time.Minute):        true,
		start.Add(time.Hour):               true,
		start.Add(time.Hour + time.Second): false,
	} {
		if got := x509ca.ValidAt(cert, at); got != want {
			t.Errorf("ValidAt(%s) = %v, want %v (valid %s to %s)", at, got, want, cert.NotBefore, cert.NotAfter)
		}
	}
}

// TestOtherTrustDomains checks that only spiffe:// URI SANs naming another
// trust domain are returned, once each and sorted, whatever their case.
func TestOtherTrustDomains(t *testing.T) {
	var uris []*url.URL
	for _, s := range []string{"spiffe://partner.test/spire/ca", "SPIFFE://Partner.Test", "https://third.test",
		"spiffe://zeta.test", "spiffe://example.org", "spiffe://zeta.test/x"} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, u)
	}
	cert := selfSigned(t, &x509.Certificate{URIs: uris, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)})
	if got, want := x509ca.OtherTrustDomains(cert, "partner.test"), []string{"example.org", "zeta.test"}; !slices.Equal(got, want) {
		t.Errorf("OtherTrustDomains(partner.test) = %v, want %v", got, want)
	}
	own := selfSigned(t, &x509.Certificate{URIs: uris[:2], NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)})
	if got := x509ca.OtherTrustDomains(own, "partner.test"); len(got) != 0 {
		t.Errorf("a CA naming only its own trust domain: OtherTrustDomains = %v, want none", got)
	}
}
