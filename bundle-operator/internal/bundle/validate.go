package bundle

import (
	"bytes"
	"crypto/x509"
	"time"

	"github.com/trustplane/trustplane/common/x509ca"
)

// RequireValidCA returns an error unless at least one certificate is a CA
// that is valid at now: a bundle of only expired or not-yet-valid CAs would
// break every TLS handshake that relies on it.
func RequireValidCA(certs []*x509.Certificate, now time.Time) error {
	if len(certs) == 0 {
		return reject(ReasonEmpty, "no certificate")
	}
	for _, c := range certs {
		if x509ca.IsCA(c) && x509ca.ValidAt(c, now) {
			return nil
		}
	}
	return reject(ReasonNoValidCA, "none of %d certificates is a CA valid at %s", len(certs), now.UTC().Format(time.RFC3339))
}

// RequireCAs returns an error naming the first certificate that is not a CA
// (basic constraints absent or CA:FALSE, or a key usage without
// keyCertSign): a leaf in a trust bundle is either
// a mistake or an attempt to pin one peer, and it is never an authority.
func RequireCAs(certs []*x509.Certificate) error {
	for i, c := range certs {
		if !x509ca.IsCA(c) {
			return reject(ReasonNotCA, "certificate %d (%s) is not a CA: basic constraints are absent or CA:FALSE, or its key usage leaves out keyCertSign", i+1, c.Subject)
		}
	}
	return nil
}

// OnlyCAs returns the certificates of certs that are CAs, in order.
func OnlyCAs(certs []*x509.Certificate) []*x509.Certificate {
	out := make([]*x509.Certificate, 0, len(certs))
	for _, c := range certs {
		if x509ca.IsCA(c) {
			out = append(out, c)
		}
	}
	return out
}

// RequireDistinctKeyIDs returns an error when two JWT authorities share a
// key ID but not the key: a verifier picks a key by its ID, so one of the
// two would be silently dropped or would shadow the other.
func RequireDistinctKeyIDs(jwt []JWTAuthority) error {
	seen := make(map[string][]byte, len(jwt))
	for _, a := range jwt {
		der, err := x509.MarshalPKIXPublicKey(a.PublicKey)
		if err != nil {
			return reject(ReasonUnparseable, "JWT authority %q: %w", a.KeyID, err)
		}
		if prev, ok := seen[a.KeyID]; ok && !bytes.Equal(prev, der) {
			return reject(ReasonKeyIDConflict, "two different JWT authorities have the key ID %q", a.KeyID)
		}
		seen[a.KeyID] = der
	}
	return nil
}
