// Package x509ca decides whether a certificate may stand as a trust anchor:
// whether it is a CA by the rules verifiers apply, and whether it is within
// its validity period. Every Trustplane operator that accepts authorities
// a user supplies (a trust bundle source, a federation's start bundle)
// judges them here, so the operators agree on what an authority is.
package x509ca

import (
	"crypto/x509"
	"encoding/asn1"
	"slices"
	"strings"
	"time"
)

// IsCA reports whether cert may sign certificates: basic constraints with
// CA:TRUE and, when it has a key usage extension, keyCertSign in it (RFC
// 5280 4.2.1.3; OpenSSL refuses such a certificate as an issuer). The
// extension's presence is read from the certificate's extensions, not from
// its parsed KeyUsage, which is 0 both without the extension and with one
// that sets no bit. A critical extension Go's parser does not handle does
// not count against a CA: OpenSSL verifies chains through CAs with some of
// them (name constraints on directory names, say).
func IsCA(cert *x509.Certificate) bool {
	if hasKeyUsage(cert) && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return false
	}
	return cert.BasicConstraintsValid && cert.IsCA
}

// ValidAt reports whether cert is within its validity period at now, both
// ends included.
func ValidAt(cert *x509.Certificate, now time.Time) bool {
	return !now.Before(cert.NotBefore) && !now.After(cert.NotAfter)
}

// OtherTrustDomains returns the trust domains, other than td, that cert
// names in spiffe:// URI SANs, sorted. A SPIRE CA names its own trust
// domain there, so a CA offered as td's that names another is not td's.
// Trust domain names compare case-insensitively.
func OtherTrustDomains(cert *x509.Certificate, td string) []string {
	var out []string
	for _, u := range cert.URIs {
		if !strings.EqualFold(u.Scheme, "spiffe") {
			continue
		}
		if host := strings.ToLower(u.Host); host != strings.ToLower(td) && !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	slices.Sort(out)
	return out
}

// hasKeyUsage reports whether cert carries a key usage extension.
func hasKeyUsage(cert *x509.Certificate) bool {
	for _, e := range cert.Extensions {
		if e.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 15}) { // key usage, RFC 5280 4.2.1.3
			return true
		}
	}
	return false
}
