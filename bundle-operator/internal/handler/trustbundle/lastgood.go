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

// errPEMNotRecorded: the last published bundle was too large for the
// status to hold its certificates' PEM.
var errPEMNotRecorded = errors.New("status.certificates do not hold the PEM of the last published bundle: it was too large to record")

// errFormatsNotRecorded: the status was written by an operator that did not
// record status.formats with the authorities of each trust domain, so only
// the PEM format can be rebuilt.
var errFormatsNotRecorded = errors.New("status.formats does not record the authorities of each trust domain of the last published bundle")

// recordFormats returns what the formats of c were rendered from besides its
// certificates (which published records): the authorities of each trust
// domain, the X.509 ones as references into status.certificates. With them
// lastGood rebuilds c byte for byte.
func recordFormats(c *content) (*v1alpha1.PublishedFormats, error) {
	rec := &v1alpha1.PublishedFormats{}
	if c.local != nil {
		jwt, err := recordJWT(c.local.Bundle)
		if err != nil {
			return nil, fmt.Errorf("trust domain %s: %w", c.local.TrustDomain, err)
		}
		rec.TrustDomain, rec.JWTAuthorities, rec.X509Authorities = c.local.TrustDomain, jwt, fingerprints(c.local.Bundle)
	}
	for _, d := range c.federated {
		jwt, err := recordJWT(d.Bundle)
		if err != nil {
			return nil, fmt.Errorf("trust domain %s: %w", d.TrustDomain, err)
		}
		rec.Federated = append(rec.Federated, v1alpha1.PublishedTrustDomain{
			TrustDomain: d.TrustDomain, X509Authorities: fingerprints(d.Bundle), JWTAuthorities: jwt,
		})
	}
	return rec, nil
}

// recordJWT returns the JWT authorities of b in PKIX DER form.
func recordJWT(b *bundle.Bundle) ([]v1alpha1.PublishedJWTAuthority, error) {
	var out []v1alpha1.PublishedJWTAuthority
	for _, a := range b.JWTAuthorities() {
		der, err := x509.MarshalPKIXPublicKey(a.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("JWT authority %q: %w", a.KeyID, err)
		}
		out = append(out, v1alpha1.PublishedJWTAuthority{KeyID: a.KeyID, PublicKey: der})
	}
	return out, nil
}

// fingerprints returns the SHA-256 of the certificates of b in bundle order.
func fingerprints(b *bundle.Bundle) []string {
	certs := b.Certificates()
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = c.SHA256
	}
	return out
}

// formatsRecorded reports whether st records the authorities of each trust
// domain. A status written before they were recorded names a trust domain
// without X.509 authorities (a SPIFFE format then held every certificate).
func formatsRecorded(st *v1alpha1.TrustBundleStatus) bool {
	return st.Formats != nil && (st.Formats.TrustDomain == "") == (len(st.Formats.X509Authorities) == 0)
}

// lastGood rebuilds the last published bundle from the status alone, so that
// it survives a restart and never depends on the sources, and renders it in
// every format exactly as it was published: the renderers are deterministic,
// so the same certificates, authorities and trust domains give the same
// bytes, hence the same target hash.
//
// The status is re-validated with the rules every source passes: each
// recorded certificate must be one CERTIFICATE block that parses and matches
// its recorded SHA-256, the certificates together must render the recorded
// fingerprint (nothing added, nothing lost), every one must be a CA and one
// valid at now, and every authority of a trust domain must be one of them.
// It returns errNeverPublished when there is no bundle to give.
func lastGood(st *v1alpha1.TrustBundleStatus, now time.Time) (*formats, error) {
	if st.Fingerprint == "" || len(st.Certificates) == 0 {
		return nil, errNeverPublished
	}
	certs := make([]*x509.Certificate, 0, len(st.Certificates))
	bySHA := make(map[string]*x509.Certificate, len(st.Certificates))
	for i, p := range st.Certificates {
		if p.PEM == "" {
			return nil, errPEMNotRecorded
		}
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
		bySHA[p.SHA256] = parsed[0]
	}
	if err := bundle.RequireCAs(certs); err != nil {
		return nil, fmt.Errorf("last published bundle: %w", err)
	}
	if err := bundle.RequireValidCA(certs, now); err != nil {
		return nil, fmt.Errorf("last published bundle: %w", err)
	}
	c := &content{all: bundle.New(certs, nil)}
	if fp := c.all.Fingerprint(); fp != st.Fingerprint {
		return nil, fmt.Errorf("status.certificates render %s, status.fingerprint is %s", fp, st.Fingerprint)
	}
	if !formatsRecorded(st) {
		f := newFormats(c)
		f.jwks, f.jwksErr = nil, errFormatsNotRecorded
		f.spiffe, f.spiffeErr = nil, errFormatsNotRecorded
		f.federated, f.federatedErr = nil, errFormatsNotRecorded
		return f, nil
	}
	rec := st.Formats
	if rec.TrustDomain != "" {
		d, err := rebuildDomain("status.formats", rec.TrustDomain, rec.X509Authorities, rec.JWTAuthorities, bySHA)
		if err != nil {
			return nil, err
		}
		c.local = &d
	}
	for i, p := range rec.Federated {
		d, err := rebuildDomain(fmt.Sprintf("status.formats.federated[%d]", i), p.TrustDomain, p.X509Authorities, p.JWTAuthorities, bySHA)
		if err != nil {
			return nil, err
		}
		c.federated = append(c.federated, d)
	}
	return newFormats(c), nil
}

// rebuildDomain rebuilds a trust domain's bundle from its record; every
// X.509 authority must be one of the published certificates.
func rebuildDomain(field, td string, x509Refs []string, jwtRec []v1alpha1.PublishedJWTAuthority, bySHA map[string]*x509.Certificate) (bundle.Domain, error) {
	var certs []*x509.Certificate
	for _, ref := range x509Refs {
		c, ok := bySHA[ref]
		if !ok {
			return bundle.Domain{}, fmt.Errorf("%s: X.509 authority %s of %s is not in status.certificates", field, ref, td)
		}
		certs = append(certs, c)
	}
	var jwt []bundle.JWTAuthority
	for i, a := range jwtRec {
		pub, err := x509.ParsePKIXPublicKey(a.PublicKey)
		if err != nil {
			return bundle.Domain{}, fmt.Errorf("%s.jwtAuthorities[%d] (%q): %w", field, i, a.KeyID, err)
		}
		jwt = append(jwt, bundle.JWTAuthority{KeyID: a.KeyID, PublicKey: pub})
	}
	return bundle.Domain{TrustDomain: td, Bundle: bundle.New(certs, jwt)}, nil
}
