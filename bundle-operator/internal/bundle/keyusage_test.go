package bundle_test

import (
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
