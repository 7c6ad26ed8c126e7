package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"time"
)

// CA is a self-signed CA certificate with its key.
type CA struct {
	// Cert is the parsed certificate.
	Cert *x509.Certificate
	// Key is the private key.
	Key *ecdsa.PrivateKey
}

// PEM returns the certificate as one CERTIFICATE block.
func (c CA) PEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw}))
}

// KeyPEM returns the private key as an EC PRIVATE KEY block.
func (c CA) KeyPEM() string {
	der, err := x509.MarshalECPrivateKey(c.Key)
	if err != nil {
		panic(fmt.Sprintf("marshal key: %v", err))
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

// NewCA returns a CA named cn valid from notBefore to notAfter. It panics on
// failure: it is for tests only.
func NewCA(cn string, notBefore, notAfter time.Time) CA {
	return newCA(cn, notBefore, notAfter, func(*x509.Certificate) {})
}

// EmptyKeyUsageCA returns a CA named cn, valid from an hour ago for a day,
// whose key usage extension is present but sets no bit (so keyCertSign is
// absent): CA:TRUE, yet no certificate it signs verifies with OpenSSL.
func EmptyKeyUsageCA(cn string) CA {
	noBit, err := asn1.Marshal(asn1.BitString{Bytes: []byte{0}, BitLength: 8})
	if err != nil {
		panic(fmt.Sprintf("key usage: %v", err))
	}
	now := time.Now()
	return newCA(cn, now.Add(-time.Hour), now.Add(24*time.Hour), func(t *x509.Certificate) {
		t.KeyUsage = 0
		t.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 15}, Critical: true, Value: noBit}}
	})
}

// TweakedCA returns ValidCA's certificate with tweak applied to its template
// first (a leaf, a v1 certificate, another key usage), for tests of what
// makes a certificate no CA.
func TweakedCA(cn string, tweak func(*x509.Certificate)) CA {
	now := time.Now()
	return newCA(cn, now.Add(-time.Hour), now.Add(24*time.Hour), tweak)
}

// newCA is NewCA with tweak applied to the certificate's template.
func newCA(cn string, notBefore, notAfter time.Time, tweak func(*x509.Certificate)) CA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("generate key: %v", err))
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(fmt.Sprintf("serial: %v", err))
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	tweak(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(fmt.Sprintf("create certificate: %v", err))
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(fmt.Sprintf("parse certificate: %v", err))
	}
	return CA{Cert: cert, Key: key}
}

// ValidCA returns a CA named cn valid from an hour ago for a day.
func ValidCA(cn string) CA {
	now := time.Now()
	return NewCA(cn, now.Add(-time.Hour), now.Add(24*time.Hour))
}

// ExpiredCA returns a CA named cn that expired an hour ago.
func ExpiredCA(cn string) CA {
	now := time.Now()
	return NewCA(cn, now.Add(-48*time.Hour), now.Add(-time.Hour))
}

// Leaf returns a certificate for spiffeID (URI SAN) signed by c, shaped as
// an X509-SVID: not a CA, for digital signatures, valid from an hour ago
// for a day. It panics on failure: it is for tests only.
func (c CA) Leaf(spiffeID string) *x509.Certificate {
	id, err := url.Parse(spiffeID)
	if err != nil {
		panic(fmt.Sprintf("parse %q: %v", spiffeID, err))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("generate key: %v", err))
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		URIs:                  []*url.URL{id},
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		panic(fmt.Sprintf("create certificate: %v", err))
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(fmt.Sprintf("parse certificate: %v", err))
	}
	return cert
}
