package trustbundle

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

// errNeverPublished: the TrustBundle has no last good bundle to give.
var errNeverPublished = errors.New("no bundle was published yet")

// errFormatsNotRecorded: the status was written by an operator that did not
// record status.formats, so only the PEM format can be rebuilt.
var errFormatsNotRecorded = errors.New("status.formats does not record the trust domain and JWT authorities of the last published bundle")

// recordFormats returns what the formats of b were rendered from besides its
// certificates (which published records): the trust domain of the SPIFFE
// format and the JWT authorities. With them lastGood rebuilds b byte for byte.
func recordFormats(b *bundle.Bundle, trustDomain string) (*v1alpha1.PublishedFormats, error) {
	rec := &v1alpha1.PublishedFormats{TrustDomain: trustDomain}
	for _, a := range b.JWTAuthorities() {
		der, err := x509.MarshalPKIXPublicKey(a.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("JWT authority %q: %w", a.KeyID, err)
		}
		rec.JWTAuthorities = append(rec.JWTAuthorities, v1alpha1.PublishedJWTAuthority{KeyID: a.KeyID, PublicKey: der})
	}
	return rec, nil
}

// lastGood rebuilds the last published bundle from the status alone, so that
// it survives a restart and never depends on the sources, and renders it in
// every format exactly as it was published: the renderers are deterministic,
// so the same certificates, JWT authorities and trust domain give the same
// bytes, hence the same target hash.
//
// The status is re-validated with the rules every source passes: each
// recorded certificate must be one CERTIFICATE block that parses and matches
// its recorded SHA-256, the certificates together must render the recorded
// fingerprint (nothing added, nothing lost), and at least one must be a CA
// valid at now. It returns errNeverPublished when there is no bundle to give.
func lastGood(st *v1alpha1.TrustBundleStatus, now time.Time) (*formats, error) {
	if st.Fingerprint == "" || len(st.Certificates) == 0 {
		return nil, errNeverPublished
	}
	certs := make([]*x509.Certificate, 0, len(st.Certificates))
	for i, p := range st.Certificates {
		parsed, err := bundle.ParsePEM([]byte(p.PEM))
		if err != nil {
			return nil, fmt.Errorf("status.certificates[%d]: %w", i, err)
		}
		if len(parsed) != 1 {
			return nil, fmt.Errorf("status.certificates[%d] holds %d certificates, want 1", i, len(parsed))
		}
		if got := bundle.NewCertificate(parsed[0]).SHA256; got != p.SHA256 {
			return nil, fmt.Errorf("status.certificates[%d] has SHA-256 %s, recorded %s", i, got, p.SHA256)
		}
		certs = append(certs, parsed[0])
	}
	if err := bundle.RequireValidCA(certs, now); err != nil {
		return nil, fmt.Errorf("last published bundle: %w", err)
	}
	var (
		jwt []bundle.JWTAuthority
		td  string
	)
	if rec := st.Formats; rec != nil {
		td = rec.TrustDomain
		for i, a := range rec.JWTAuthorities {
			pub, err := x509.ParsePKIXPublicKey(a.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("status.formats.jwtAuthorities[%d] (%q): %w", i, a.KeyID, err)
			}
			jwt = append(jwt, bundle.JWTAuthority{KeyID: a.KeyID, PublicKey: pub})
		}
	}
	b := bundle.New(certs, jwt)
	if fp := b.Fingerprint(); fp != st.Fingerprint {
		return nil, fmt.Errorf("status.certificates render %s, status.fingerprint is %s", fp, st.Fingerprint)
	}
	f, err := newFormats(b, td)
	if err != nil {
		return nil, fmt.Errorf("render the last published bundle: %w", err)
	}
	if st.Formats == nil {
		f.jwks, f.jwksErr = nil, errFormatsNotRecorded
		f.spiffe, f.spiffeErr = nil, errFormatsNotRecorded
	}
	return f, nil
}
