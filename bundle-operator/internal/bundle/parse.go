package bundle

import (
	"crypto/x509"

	"github.com/trustplane/trustplane/common/pemcerts"
)

// Reasons a bundle is rejected; each names a rule a user can act on. They
// double as condition reasons. Those of parsing are package pemcerts'.
const (
	// ReasonEmpty: the input holds no certificate.
	ReasonEmpty = pemcerts.ReasonEmpty
	// ReasonPrivateKey: the input holds a private key, which must never be
	// distributed.
	ReasonPrivateKey = pemcerts.ReasonPrivateKey
	// ReasonNotCertificate: the input holds a PEM block that is not a CERTIFICATE.
	ReasonNotCertificate = pemcerts.ReasonNotCertificate
	// ReasonPEMHeaders: a CERTIFICATE block carries PEM headers.
	ReasonPEMHeaders = pemcerts.ReasonPEMHeaders
	// ReasonUnparseable: a block or text does not parse.
	ReasonUnparseable = pemcerts.ReasonUnparseable
	// ReasonNoValidCA: no CA in the input is valid now.
	ReasonNoValidCA = "NoValidCA"
	// ReasonNotCA: a certificate is not a CA (basic constraints absent or
	// CA:FALSE, or a key usage without keyCertSign).
	ReasonNotCA = "NotACA"
	// ReasonKeyIDConflict: two different JWT authorities share a key ID.
	ReasonKeyIDConflict = "JWTKeyIDConflict"
)

// Error is a rejected bundle: a Reason constant and a message.
type Error = pemcerts.Error

// reject builds an Error; a %w verb in format makes its argument the cause.
func reject(reason, format string, args ...any) *Error {
	return pemcerts.Reject(reason, format, args...)
}

// ParsePEM parses a PEM bundle under the parsing rules of package pemcerts
// and returns its certificates in input order; a partial bundle is never
// returned.
func ParsePEM(data []byte) ([]*x509.Certificate, error) { return pemcerts.Parse(data) }

// ParseDER parses DER certificates (as the SPIRE Bundle API returns them).
func ParseDER(ders [][]byte) ([]*x509.Certificate, error) {
	certs := make([]*x509.Certificate, 0, len(ders))
	for i, der := range ders {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, reject(ReasonUnparseable, "certificate %d: %w", i+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, reject(ReasonEmpty, "no X.509 authority")
	}
	return certs, nil
}
