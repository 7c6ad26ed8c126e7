package trustbundle

import (
	"errors"
	"time"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

// defaultPEMKey is used when a target names no key at all.
const defaultPEMKey = "ca.crt"

// content is what one pass publishes, before rendering: every CA of every
// source (the PEM format, injection and the status) and, kept apart, the
// SPIFFE bundle of each trust domain read from SPIRE. A trust domain's
// document holds only what SPIRE has for that trust domain.
type content struct {
	// all holds the certificates of every source (no JWT authorities).
	all *bundle.Bundle
	// local is the SPIRE server's own trust domain; nil without a spire
	// source.
	local *bundle.Domain
	// federated are the federated trust domains, sorted by name.
	federated []bundle.Domain
}

// dropExpired returns c without the certificates and JWT authorities
// expired at now.
func (c *content) dropExpired(now time.Time) *content {
	out := &content{all: c.all.DropExpired(now)}
	if c.local != nil {
		d := c.local.DropExpired(now)
		out.local = &d
	}
	for _, d := range c.federated {
		out.federated = append(out.federated, d.DropExpired(now))
	}
	return out
}

// domainDocument is the rendered SPIFFE bundle of a federated trust domain.
type domainDocument struct {
	trustDomain string
	doc         []byte
}

// formats holds the formats of one bundle, rendered once for all targets.
// A format that cannot be rendered holds the error that fails only the
// targets naming it; the others, and injection, go on.
type formats struct {
	// all is the bundle of the PEM format, kept for the trust stores,
	// which are rendered per password.
	all          *bundle.Bundle
	pem          []byte
	jwks         []byte
	jwksErr      error
	spiffe       []byte
	spiffeErr    error
	federated    []domainDocument
	federatedErr error
}

// newFormats renders c in every format.
func newFormats(c *content) *formats {
	f := &formats{all: c.all, pem: c.all.PEM()}
	if c.local == nil {
		f.spiffeErr = ctrlerrors.WithReason(ReasonNoSpireSource,
			ctrlerrors.BlockedErrorf("the SPIFFE formats need a spire source: a trust domain's authorities come only from its SPIRE server"))
		f.federatedErr = f.spiffeErr
		// Without a spire source there are no JWT authorities: a key set
		// would be empty, and a target is never given an empty bundle.
		f.jwksErr = ctrlerrors.WithReason(ReasonNoSpireSource,
			ctrlerrors.BlockedErrorf("the JWKS format needs a spire source: JWT authorities come only from the SPIRE server"))
		return f
	}
	switch raw, err := c.local.Bundle.JWKS(); {
	case err != nil:
		f.jwksErr = unrenderable("JWKS", err)
	case len(c.local.Bundle.JWTAuthorities()) == 0:
		// SPIRE lists none (or dropExpired dropped every one): a target
		// is never given an empty key set.
		f.jwksErr = unrenderable("JWKS", errors.New("the spire source has no JWT authority to publish"))
	default:
		f.jwks = raw
	}
	if raw, err := c.local.SPIFFE(); err != nil {
		f.spiffeErr = unrenderable("SPIFFE", err)
	} else {
		f.spiffe = raw
	}
	for _, d := range c.federated {
		raw, err := d.SPIFFE()
		if err != nil {
			f.federatedErr = unrenderable("federated SPIFFE", err)
			f.federated = nil
			break
		}
		f.federated = append(f.federated, domainDocument{trustDomain: d.TrustDomain, doc: raw})
	}
	return f
}

// unrenderable is the error of a format that cannot be rendered.
func unrenderable(format string, err error) error {
	return ctrlerrors.WithReason(ReasonFormatNotRenderable, ctrlerrors.BlockedErrorf("render the %s format: %w", format, err))
}

// data returns the data of an object target: one entry per key it names.
func (f *formats) data(keys v1alpha1.Keys) (map[string][]byte, error) {
	if keys.PEM == "" && keys.SPIFFE == "" && keys.JWKS == "" && keys.FederatedSPIFFE == "" && keys.PKCS12 == "" && keys.JKS == "" {
		keys.PEM = defaultPEMKey
	}
	out := map[string][]byte{}
	n := 0
	if keys.PEM != "" {
		out[keys.PEM] = f.pem
		n++
	}
	if keys.SPIFFE != "" {
		if f.spiffeErr != nil {
			return nil, f.spiffeErr
		}
		out[keys.SPIFFE] = f.spiffe
		n++
	}
	if keys.JWKS != "" {
		if f.jwksErr != nil {
			return nil, f.jwksErr
		}
		out[keys.JWKS] = f.jwks
		n++
	}
	for _, store := range []struct {
		key    string
		name   string
		render func(string) ([]byte, error)
	}{{keys.PKCS12, "PKCS#12", f.all.PKCS12}, {keys.JKS, "JKS", f.all.JKS}} {
		if store.key == "" {
			continue
		}
		raw, err := store.render(keys.TrustStorePassword)
		if err != nil {
			return nil, unrenderable(store.name, err)
		}
		out[store.key] = raw
		n++
	}
	if keys.FederatedSPIFFE != "" {
		if f.federatedErr != nil {
			return nil, f.federatedErr
		}
		for _, d := range f.federated {
			out[keys.FederatedSPIFFE+d.trustDomain] = d.doc
			n++
		}
	}
	if len(out) != n {
		return nil, ctrlerrors.WithReason(ReasonKeysCollide, ctrlerrors.BlockedErrorf("target keys %+v name one key twice", keys))
	}
	if len(out) == 0 {
		// Only keys.federatedSpiffe, and no federated trust domain: the
		// target would hold nothing, and be written empty.
		return nil, ctrlerrors.WithReason(ReasonNoFederatedTrustDomains, ctrlerrors.BlockedErrorf(
			"the target's only key is keys.federatedSpiffe (%q) and the spire source lists no federatedTrustDomains, so it would hold no bundle: list the trust domains in federatedTrustDomains, or give the target a key of the local bundle (pem, spiffe, jwks)",
			keys.FederatedSPIFFE))
	}
	return out, nil
}

// binaryKeys are the keys of keys that hold binary data (a ConfigMap
// writes them to binaryData).
func binaryKeys(keys v1alpha1.Keys) map[string]bool {
	out := map[string]bool{}
	for _, k := range []string{keys.PKCS12, keys.JKS} {
		if k != "" {
			out[k] = true
		}
	}
	return out
}
