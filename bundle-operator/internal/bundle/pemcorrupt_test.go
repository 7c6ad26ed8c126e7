package bundle_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestACorruptBlockHiddenBetweenGoodOnesFailsTheWholeSource: each input
// holds good certificates and one block that does not decode, placed where
// a lenient reader would skip it. The whole input must be refused; nothing
// of it may be returned.
func TestACorruptBlockHiddenBetweenGoodOnesFailsTheWholeSource(t *testing.T) {
	a, b, c := testpki.ValidCA("a").PEM(), testpki.ValidCA("b").PEM(), testpki.ValidCA("c").PEM()
	corrupt := b[:40] + "!" + b[41:]
	body := func(p string) string {
		lines := strings.Split(strings.TrimSpace(p), "\n")
		return strings.Join(lines[1:len(lines)-1], "")
	}
	cases := map[string]string{
		// The next block's BEGIN follows the END line of a corrupt block on
		// the same line, so it does not start a line.
		"BEGIN on the END line of a corrupt block": a + strings.TrimSuffix(corrupt, "\n") + strings.TrimSuffix(c, "\n") + "\n" + a,
		"indented corrupt block":                   a + "\t" + corrupt + c,
		"corrupt block after a form feed":          a + "\f" + corrupt + c,
		"corrupt block after a vertical tab":       a + "\v" + corrupt + c,
		"corrupt block indented by CR":             a + "\r" + corrupt + c,
		"two certificates in one block":            "-----BEGIN CERTIFICATE-----\n" + body(a) + body(c) + "\n-----END CERTIFICATE-----\n",
		"padding in the middle of a block":         "-----BEGIN CERTIFICATE-----\n" + body(a) + "====\n" + body(c) + "\n-----END CERTIFICATE-----\n",
		"base64url in a block":                     a + strings.NewReplacer("+", "-", "/", "_").Replace(c),
		"END line of another block type":           strings.Replace(a, "-----END CERTIFICATE-----", "-----END CERTIFICATE REQUEST-----", 1) + c,
		"BEGIN line with two spaces":               strings.Replace(a, "-----BEGIN CERTIFICATE-----", "-----BEGIN  CERTIFICATE-----", 1) + c,
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			certs, err := bundle.ParsePEM([]byte(input))
			if err == nil {
				t.Fatalf("ParsePEM() accepted the input with %d certificates", len(certs))
			}
			if certs != nil {
				t.Errorf("ParsePEM() returned %d certificates with its error", len(certs))
			}
		})
	}
}

// TestABlockThatDecodesIsNeverReadAsAnotherCertificate: a certificate whose
// base64 is split by blank lines or spaces is either refused or read as
// exactly that certificate.
func TestABlockThatDecodesIsNeverReadAsAnotherCertificate(t *testing.T) {
	ca := testpki.ValidCA("a")
	b64 := base64.StdEncoding.EncodeToString(ca.Cert.Raw)
	half := len(b64) / 2
	for name, input := range map[string]string{
		"blank line inside":    "-----BEGIN CERTIFICATE-----\n" + b64[:half] + "\n\n" + b64[half:] + "\n-----END CERTIFICATE-----\n",
		"spaces inside a line": "-----BEGIN CERTIFICATE-----\n" + b64[:half] + "  " + b64[half:] + "\n-----END CERTIFICATE-----\n",
		"one long line":        "-----BEGIN CERTIFICATE-----\n" + b64 + "\n-----END CERTIFICATE-----\n",
	} {
		t.Run(name, func(t *testing.T) {
			certs, err := bundle.ParsePEM([]byte(input))
			if err != nil {
				return
			}
			if len(certs) != 1 || !certs[0].Equal(ca.Cert) {
				t.Fatalf("ParsePEM() = %d certificates, not exactly the one written", len(certs))
			}
		})
	}
}

// TestAnAllExpiredOrNotYetValidSourceIsRefused: a source whose only CAs are
// expired or not yet valid has no CA valid now.
func TestAnAllExpiredOrNotYetValidSourceIsRefused(t *testing.T) {
	expired := testpki.ExpiredCA("old")
	future := testpki.NewCA("future", expired.Cert.NotAfter.AddDate(50, 0, 0), expired.Cert.NotAfter.AddDate(60, 0, 0))
	certs, err := bundle.ParsePEM([]byte(expired.PEM() + future.PEM()))
	if err != nil {
		t.Fatal(err)
	}
	if err := bundle.RequireValidCA(certs, expired.Cert.NotAfter.AddDate(1, 0, 0)); !hasReason(err, bundle.ReasonNoValidCA) {
		t.Fatalf("RequireValidCA() = %v, want %s", err, bundle.ReasonNoValidCA)
	}
}
