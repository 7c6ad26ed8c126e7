package bundle_test

import (
	"encoding/pem"
	"testing"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAdversarialBlocksThatAreNoPlainCertificateRefuseTheWholeSource: beside a
// good CA, a PKCS#7 bundle, an encrypted PKCS#8 key, a legacy encrypted
// RSA key (with Proc-Type headers), a CERTIFICATE block whose DER carries
// trailing bytes, a CRL in a CERTIFICATE block, and a UTF-8 byte order
// mark. Each must refuse the whole source (never a partial bundle of the
// good CA alone, never a key passed on).
func TestAdversarialBlocksThatAreNoPlainCertificateRefuseTheWholeSource(t *testing.T) {
	ca := testpki.ValidCA("good")
	other := testpki.ValidCA("other")
	block := func(typ string, h map[string]string, b []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Headers: h, Bytes: b}))
	}
	cases := map[string]string{
		"PKCS7":                 block("PKCS7", nil, other.Cert.Raw),
		"ENCRYPTED PRIVATE KEY": block("ENCRYPTED PRIVATE KEY", nil, []byte{0x30, 0x00}),
		"legacy encrypted key":  block("RSA PRIVATE KEY", map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00"}, []byte{1}),
		"trailing DER":          block("CERTIFICATE", nil, append(append([]byte{}, other.Cert.Raw...), 0, 0)),
		"CRL as CERTIFICATE":    block("CERTIFICATE", nil, []byte{0x30, 0x03, 0x02, 0x01, 0x01}),
		"BOM":                   "\xef\xbb\xbf" + other.PEM(),
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			for _, text := range []string{ca.PEM() + extra, extra + ca.PEM()} {
				certs, err := bundle.ParsePEM([]byte(text))
				if err == nil {
					t.Fatalf("ParsePEM accepted %d certificates from a source with a %s", len(certs), name)
				}
			}
		})
	}
}
