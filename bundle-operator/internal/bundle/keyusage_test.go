package bundle_test

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAnEmptyKeyUsageExtensionIsNotACA: a certificate whose key usage
// extension leaves out keyCertSign is no CA (OpenSSL refuses it as an
// issuer), also when the extension sets no bit at all: Go parses that to
// KeyUsage == 0, the value it gives a certificate without the extension,
// and a source whose only CA was such a certificate used to be published.
func TestAnEmptyKeyUsageExtensionIsNotACA(t *testing.T) {
	now := time.Now()
	pemBytes := []byte(testpki.EmptyKeyUsageCA("empty key usage").PEM())
	certs, err := bundle.ParsePEM(pemBytes)
	if err != nil {
		t.Fatalf("ParsePEM() = %v", err)
	}
	if err := bundle.RequireCAs(certs); !hasReason(err, bundle.ReasonNotCA) {
		t.Errorf("RequireCAs(CA:TRUE with a key usage extension that leaves out keyCertSign) = %v, want %s", err, bundle.ReasonNotCA)
	}
	if err := bundle.RequireValidCA(certs, now); !hasReason(err, bundle.ReasonNoValidCA) {
		t.Errorf("RequireValidCA(only such a CA) = %v, want %s: the bundle would be published with no CA OpenSSL accepts as an issuer", err, bundle.ReasonNoValidCA)
	}
	if got := bundle.OnlyCAs(certs); len(got) != 0 {
		t.Errorf("OnlyCAs() kept %d certificates, want 0 (dropNonCA must drop it)", len(got))
	}
}

// TestACAWithAnUnknownCriticalExtensionIsNotACA: a CA carrying a critical
// extension no verifier knows is refused as an issuer by Go's verifier (as
// checked here) and by OpenSSL, so it is no CA for a bundle either.
func TestACAWithAnUnknownCriticalExtensionIsNotACA(t *testing.T) {
	ca := testpki.UnknownCriticalExtensionCA("unknown critical extension")
	leaf := ca.Leaf("spiffe://example.org/w")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if !errors.As(err, &x509.UnhandledCriticalExtension{}) {
		t.Fatalf("Go's verifier on a chain through a CA with an unknown critical extension: %v, want UnhandledCriticalExtension", err)
	}
	certs, err := bundle.ParsePEM([]byte(ca.PEM()))
	if err != nil {
		t.Fatalf("ParsePEM() = %v", err)
	}
	if err := bundle.RequireCAs(certs); !hasReason(err, bundle.ReasonNotCA) {
		t.Errorf("RequireCAs() = %v, want %s", err, bundle.ReasonNotCA)
	}
	if err := bundle.RequireValidCA(certs, time.Now()); !hasReason(err, bundle.ReasonNoValidCA) {
		t.Errorf("RequireValidCA(only such a CA) = %v, want %s", err, bundle.ReasonNoValidCA)
	}
	if got := bundle.OnlyCAs(certs); len(got) != 0 {
		t.Errorf("OnlyCAs() kept %d certificates, want 0", len(got))
	}
	// The same CA without the extension is one.
	if err := bundle.RequireCAs([]*x509.Certificate{testpki.ValidCA("plain").Cert}); err != nil {
		t.Errorf("RequireCAs(a plain CA) = %v", err)
	}
}
