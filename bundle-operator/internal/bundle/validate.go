package bundle

import (
	"crypto/x509"
	"time"
)

// ValidNow reports whether cert is within its validity period at now.
func ValidNow(cert *x509.Certificate, now time.Time) bool {
	return !now.Before(cert.NotBefore) && !now.After(cert.NotAfter)
}

// isCA reports whether cert may sign certificates.
func isCA(cert *x509.Certificate) bool {
	return cert.BasicConstraintsValid && cert.IsCA
}

// RequireValidCA returns an error unless at least one certificate is a CA
// that is valid at now: a bundle of only expired or not-yet-valid CAs would
// break every TLS handshake that relies on it.
func RequireValidCA(certs []*x509.Certificate, now time.Time) error {
	if len(certs) == 0 {
		return reject(ReasonEmpty, "no certificate")
	}
	for _, c := range certs {
		if isCA(c) && ValidNow(c, now) {
			return nil
		}
	}
	return reject(ReasonNoValidCA, "none of %d certificates is a CA valid at %s", len(certs), now.UTC().Format(time.RFC3339))
}
