package pemcerts_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/pemcerts"
)

// certPEM returns a self-signed CA certificate as PEM, and its key as PEM.
func certPEM(t *testing.T, cn string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// TestParseRefusesWhatALenientReaderSkips: encoding/pem (and readers built
// on it) skip what they cannot decode and return the rest; Parse refuses
// the whole bundle, naming the rule, whatever comes before or after a good
// certificate. The oracle is the certificates a good bundle holds: exactly
// its blocks, in order.
func TestParseRefusesWhatALenientReaderSkips(t *testing.T) {
	a, key := certPEM(t, "a")
	b, _ := certPEM(t, "b")
	certs, err := pemcerts.Parse([]byte("\n" + a + "\n\n" + b))
	if err != nil || len(certs) != 2 || certs[0].Subject.CommonName != "a" || certs[1].Subject.CommonName != "b" {
		t.Fatalf("Parse(a, b) = %d certificates, %v; want a then b", len(certs), err)
	}
	for name, c := range map[string]struct{ input, reason string }{
		"a corrupt block before a good one": {"-----BEGIN CERTIFICATE-----\nnot*base64\n-----END CERTIFICATE-----\n" + a, pemcerts.ReasonUnparseable},
		"a block without its END line":      {strings.TrimSuffix(a, "-----END CERTIFICATE-----\n") + b, pemcerts.ReasonUnparseable},
		"text between blocks":               {a + "note: the next one is b\n" + b, pemcerts.ReasonUnparseable},
		"a private key after a certificate": {a + key, pemcerts.ReasonPrivateKey},
		"another block type":                {a + "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n", pemcerts.ReasonNotCertificate},
		"PEM headers":                       {strings.Replace(a, "-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n", 1), pemcerts.ReasonPEMHeaders},
		"nothing but whitespace":            {" \n\t\n", pemcerts.ReasonEmpty},
	} {
		t.Run(name, func(t *testing.T) {
			certs, err := pemcerts.Parse([]byte(c.input))
			var pe *pemcerts.Error
			if !errors.As(err, &pe) || pe.Reason != c.reason || certs != nil {
				t.Errorf("Parse() = %d certificates, %v; want none and the reason %s", len(certs), err, c.reason)
			}
		})
	}
}
