package bundle_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAdversarialPEMThatWouldSmuggleOrDropACertificateIsRefusedWhole: inputs a
// tenant-style author might use to get a certificate in or out of a bundle
// unseen. Each must refuse the whole source with a *bundle.Error (never a
// panic, never a partial list).
func TestAdversarialPEMThatWouldSmuggleOrDropACertificateIsRefusedWhole(t *testing.T) {
	a, b := testpki.ValidCA("a"), testpki.ValidCA("b")
	key := a.KeyPEM()
	twoInOne := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: append(append([]byte{}, a.Cert.Raw...), b.Cert.Raw...)}))
	keyAsCert := strings.ReplaceAll(key, "EC PRIVATE KEY", "CERTIFICATE")
	cases := map[string]string{
		"second END line after a good block":      a.PEM() + "-----END CERTIFICATE-----\n" + b.PEM(),
		"good block after a truncated one":        a.PEM()[:len(a.PEM())/2] + "\n" + b.PEM(),
		"BEGIN of another type before a good END": strings.Replace(a.PEM(), "BEGIN CERTIFICATE", "BEGIN X509 CRL", 1) + b.PEM(),
		"a private key between two certificates":  a.PEM() + key + b.PEM(),
		"a private key typed as a certificate":    a.PEM() + keyAsCert,
		"two certificates in one block":           twoInOne,
		"CR-only line ends":                       strings.ReplaceAll(a.PEM(), "\n", "\r"),
		"an encrypted-PEM header":                 strings.Replace(a.PEM(), "-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n", 1),
		"an empty body":                           "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
		"only whitespace":                         " \t\r\n\v\f",
		"nothing":                                 "",
		"a BEGIN line without dashes at the end":  strings.Replace(a.PEM(), "BEGIN CERTIFICATE-----", "BEGIN CERTIFICATE", 1),
		"a NUL inside the base64":                 strings.Replace(a.PEM(), "\n", "\n\x00", 2),
		"junk after the last certificate's END":   a.PEM() + b.PEM() + "#",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			certs, err := bundle.ParsePEM([]byte(in))
			if err == nil {
				t.Fatalf("ParsePEM() accepted %d certificates", len(certs))
			}
			if _, ok := err.(*bundle.Error); !ok {
				t.Fatalf("ParsePEM() = %T %v, want a *bundle.Error with a reason", err, err)
			}
		})
	}
}

// TestAdversarialAHugeSourceIsParsedInLinearTime: a source of 1 MiB (the most a
// ConfigMap holds) of small certificates; the parser recounts line numbers
// from the start for every block, which must not make a pass take long.
func TestAdversarialAHugeSourceIsParsedInLinearTime(t *testing.T) {
	one := testpki.ValidCA("x").PEM()
	in := []byte(strings.Repeat(one, (1<<20)/len(one)))
	start := time.Now()
	certs, err := bundle.ParsePEM(in)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ParsePEM() of %d bytes (%d certificates) took %v", len(in), len(certs), d)
	}
	if n := bundle.New(certs, nil).Len(); n != 1 {
		t.Fatalf("a certificate repeated %d times became %d bundle entries, want 1", len(certs), n)
	}
}

// TestAdversarialNoCertificateThatCannotIssueCountsAsAValidCA: leaves, v1
// certificates without basic constraints, CA:TRUE without keyCertSign,
// expired and not-yet-valid CAs: none makes a source valid on its own.
func TestAdversarialNoCertificateThatCannotIssueCountsAsAValidCA(t *testing.T) {
	now := time.Now()
	ca := testpki.ValidCA("issuer")
	leaf := ca.Leaf("spiffe://example.org/w")
	v1 := testpki.TweakedCA("t", func(c *x509.Certificate) { c.BasicConstraintsValid = false; c.IsCA = false }).Cert
	noCertSign := testpki.TweakedCA("t", func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }).Cert
	future := testpki.NewCA("future", now.Add(time.Hour), now.Add(48*time.Hour)).Cert
	expired := testpki.ExpiredCA("old").Cert
	for name, c := range map[string]*x509.Certificate{"leaf": leaf, "v1": v1, "no keyCertSign": noCertSign, "not yet valid": future, "expired": expired} {
		if err := bundle.RequireValidCA([]*x509.Certificate{c}, now); err == nil {
			t.Errorf("%s: RequireValidCA() = nil, want a refusal", name)
		}
	}
	for name, c := range map[string]*x509.Certificate{"leaf": leaf, "v1": v1, "no keyCertSign": noCertSign} {
		if err := bundle.RequireCAs([]*x509.Certificate{ca.Cert, c}); err == nil {
			t.Errorf("%s: RequireCAs() = nil beside a valid CA, want NotACA", name)
		}
	}
}
