package bundle_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestParsePEMEdgeCases tries inputs that a lenient reader would accept
// while dropping or changing a certificate, or that name the certificate
// in a form other than a plain CERTIFICATE block.
func TestParsePEMEdgeCases(t *testing.T) {
	good := testpki.ValidCA("good").PEM()
	other := testpki.ValidCA("other")
	trailingDER := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: append(append([]byte{}, other.Cert.Raw...), 0, 0)}))
	beginInHeader := strings.Replace(other.PEM(), "-----BEGIN CERTIFICATE-----\n",
		"-----BEGIN CERTIFICATE-----\nX-Note: -----BEGIN CERTIFICATE-----\n\n", 1)
	nested := strings.Replace(other.PEM(), "\n", "\n"+good, 1)
	cases := []struct {
		name   string
		input  string
		reason string
	}{
		{"UTF-8 byte order mark", "\ufeff" + good, bundle.ReasonUnparseable},
		{"NUL byte after the last block", good + "\x00", bundle.ReasonUnparseable},
		{"text after the END line", strings.TrimSuffix(good, "\n") + " trailing\n", bundle.ReasonUnparseable},
		{"text after the last block without a newline", good + "x", bundle.ReasonUnparseable},
		{"DER with trailing bytes", trailingDER, bundle.ReasonUnparseable},
		{"BEGIN line in a PEM header", beginInHeader, bundle.ReasonUnparseable},
		{"a block inside a block", nested, bundle.ReasonUnparseable},
		{"OpenSSL TRUSTED CERTIFICATE", strings.ReplaceAll(other.PEM(), "CERTIFICATE", "TRUSTED CERTIFICATE"), bundle.ReasonNotCertificate},
		{"X509 CERTIFICATE", strings.ReplaceAll(other.PEM(), "CERTIFICATE", "X509 CERTIFICATE"), bundle.ReasonNotCertificate},
		{"lower-case block type", strings.ReplaceAll(other.PEM(), "CERTIFICATE", "certificate"), bundle.ReasonNotCertificate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			certs, err := bundle.ParsePEM([]byte(tc.input))
			var be *bundle.Error
			if !errors.As(err, &be) {
				t.Fatalf("ParsePEM() = %d certificates, %v; want a *bundle.Error", len(certs), err)
			}
			if be.Reason != tc.reason {
				t.Errorf("reason = %q, want %q (%v)", be.Reason, tc.reason, err)
			}
		})
	}
}

// TestParsePEMAcceptsCRLFAndDuplicates: Windows line ends are whitespace,
// and a certificate given twice is returned twice (bundle.New dedupes).
func TestParsePEMAcceptsCRLFAndDuplicates(t *testing.T) {
	ca := testpki.ValidCA("crlf")
	crlf := strings.ReplaceAll(ca.PEM(), "\n", "\r\n")
	certs, err := bundle.ParsePEM([]byte(crlf + crlf))
	if err != nil {
		t.Fatalf("ParsePEM() = %v", err)
	}
	if len(certs) != 2 || !certs[0].Equal(ca.Cert) || !certs[1].Equal(ca.Cert) {
		t.Fatalf("ParsePEM() = %d certificates, want the CA twice", len(certs))
	}
	if n := bundle.New(certs, nil).Len(); n != 1 {
		t.Errorf("bundle of the CA twice has %d certificates, want 1", n)
	}
}

// TestCAWithoutCertSignIsNotACA: a certificate with CA:TRUE whose key
// usage leaves out keyCertSign may not sign certificates (RFC 5280
// 4.2.1.3; OpenSSL refuses it as an issuer), so a bundle of only such a
// CA would break the handshakes that rely on it.
func TestCAWithoutCertSignIsNotACA(t *testing.T) {
	noCertSign := newCert(x509.KeyUsageDigitalSignature)
	noKeyUsage := newCert(0)
	if err := bundle.RequireCAs([]*x509.Certificate{noCertSign}); !hasReason(err, bundle.ReasonNotCA) {
		t.Errorf("RequireCAs(CA:TRUE without keyCertSign) = %v, want %s", err, bundle.ReasonNotCA)
	}
	if err := bundle.RequireValidCA([]*x509.Certificate{noCertSign}, time.Now()); !hasReason(err, bundle.ReasonNoValidCA) {
		t.Errorf("RequireValidCA(CA:TRUE without keyCertSign) = %v, want %s", err, bundle.ReasonNoValidCA)
	}
	if got := bundle.OnlyCAs([]*x509.Certificate{noCertSign, noKeyUsage}); len(got) != 1 || got[0] != noKeyUsage {
		t.Errorf("OnlyCAs() kept %d certificates, want only the one without a key usage extension", len(got))
	}
	if err := bundle.RequireCAs([]*x509.Certificate{noKeyUsage}); err != nil {
		t.Errorf("RequireCAs(CA:TRUE without a key usage extension) = %v, want nil", err)
	}
}

func hasReason(err error, reason string) bool {
	var be *bundle.Error
	return errors.As(err, &be) && be.Reason == reason
}

// newCert returns a self-signed CA:TRUE certificate with key usage ku
// (0: no key usage extension).
func newCert(ku x509.KeyUsage) *x509.Certificate {
	return testpki.TweakedCA("ku", func(c *x509.Certificate) { c.KeyUsage = ku }).Cert
}
