package bundle

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Certificate is a CA certificate of a Bundle.
type Certificate struct {
	// X509 is the parsed certificate.
	X509 *x509.Certificate
	// SHA256 is the hex SHA-256 of the DER encoding, the identity used for
	// deduplication and ordering.
	SHA256 string
}

// NewCertificate wraps cert with its fingerprint.
func NewCertificate(cert *x509.Certificate) Certificate {
	sum := sha256.Sum256(cert.Raw)
	return Certificate{X509: cert, SHA256: hex.EncodeToString(sum[:])}
}

// JWTAuthority is a JWT signing key of a trust domain.
type JWTAuthority struct {
	// KeyID is the key's "kid".
	KeyID string
	// PublicKey is the public key.
	PublicKey crypto.PublicKey
	// ExpiresAt is when the key expires (SPIRE's expiresAt); zero for never.
	ExpiresAt time.Time
}

// Domain is the SPIFFE bundle of one trust domain: its X.509 and JWT
// authorities. Each trust domain is rendered as its own document and never
// merged with another's: an authority of one domain must not verify the
// identities of another.
type Domain struct {
	// TrustDomain is the trust domain name, e.g. "example.org".
	TrustDomain string
	// Bundle holds the trust domain's authorities.
	Bundle *Bundle
}

// SPIFFE renders d as a SPIFFE bundle document (see Bundle.SPIFFE).
func (d Domain) SPIFFE() ([]byte, error) { return d.Bundle.SPIFFE(d.TrustDomain) }

// DropExpired returns d without the authorities expired at now.
func (d Domain) DropExpired(now time.Time) Domain {
	return Domain{TrustDomain: d.TrustDomain, Bundle: d.Bundle.DropExpired(now)}
}

// Bundle is a deduplicated, ordered set of CA certificates and JWT
// authorities. Build it with New; it is not modified afterwards.
type Bundle struct {
	certs []Certificate
	jwt   []JWTAuthority
}

// New merges certs and jwt into a Bundle: certificates deduplicated by
// SHA-256 and sorted by it, JWT authorities deduplicated by key ID (first
// wins) and sorted by it. The order of the input does not matter.
func New(certs []*x509.Certificate, jwt []JWTAuthority) *Bundle {
	seen := make(map[string]bool, len(certs))
	b := &Bundle{}
	for _, c := range certs {
		cc := NewCertificate(c)
		if seen[cc.SHA256] {
			continue
		}
		seen[cc.SHA256] = true
		b.certs = append(b.certs, cc)
	}
	slices.SortFunc(b.certs, func(x, y Certificate) int { return strings.Compare(x.SHA256, y.SHA256) })

	kids := make(map[string]bool, len(jwt))
	for _, a := range jwt {
		if kids[a.KeyID] {
			continue
		}
		kids[a.KeyID] = true
		b.jwt = append(b.jwt, a)
	}
	slices.SortFunc(b.jwt, func(x, y JWTAuthority) int { return strings.Compare(x.KeyID, y.KeyID) })
	return b
}

// Certificates returns the certificates in bundle order.
func (b *Bundle) Certificates() []Certificate { return slices.Clone(b.certs) }

// X509 returns the parsed certificates in bundle order.
func (b *Bundle) X509() []*x509.Certificate {
	out := make([]*x509.Certificate, len(b.certs))
	for i, c := range b.certs {
		out[i] = c.X509
	}
	return out
}

// JWTAuthorities returns the JWT authorities sorted by key ID.
func (b *Bundle) JWTAuthorities() []JWTAuthority { return slices.Clone(b.jwt) }

// Len returns the number of certificates.
func (b *Bundle) Len() int { return len(b.certs) }

// DropExpired returns a Bundle without the certificates and JWT authorities
// expired at now (JWT authorities without an expiry stay).
func (b *Bundle) DropExpired(now time.Time) *Bundle {
	out := &Bundle{}
	for _, c := range b.certs {
		if !now.After(c.X509.NotAfter) {
			out.certs = append(out.certs, c)
		}
	}
	for _, a := range b.jwt {
		if a.ExpiresAt.IsZero() || !now.After(a.ExpiresAt) {
			out.jwt = append(out.jwt, a)
		}
	}
	return out
}

// EarliestExpiry returns the earliest NotAfter, or the zero time for an
// empty bundle.
func (b *Bundle) EarliestExpiry() time.Time {
	var earliest time.Time
	for _, c := range b.certs {
		if earliest.IsZero() || c.X509.NotAfter.Before(earliest) {
			earliest = c.X509.NotAfter
		}
	}
	return earliest
}

// Fingerprint returns "sha256:" and the hex SHA-256 of the PEM rendering.
func (b *Bundle) Fingerprint() string {
	sum := sha256.Sum256(b.PEM())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Equal reports whether b and o hold the same certificates and JWT key IDs.
func (b *Bundle) Equal(o *Bundle) bool {
	if len(b.certs) != len(o.certs) || len(b.jwt) != len(o.jwt) {
		return false
	}
	for i := range b.certs {
		if b.certs[i].SHA256 != o.certs[i].SHA256 {
			return false
		}
	}
	for i := range b.jwt {
		if b.jwt[i].KeyID != o.jwt[i].KeyID {
			return false
		}
	}
	return true
}

// String summarises the bundle for logs.
func (b *Bundle) String() string {
	return fmt.Sprintf("%d CAs, %d JWT authorities", len(b.certs), len(b.jwt))
}
