package trustbundle

import (
	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

// defaultPEMKey is used when a target names no key at all.
const defaultPEMKey = "ca.crt"

// formats holds the formats of one bundle, rendered once for all targets.
// A format that cannot be rendered holds the error a target naming it gets.
type formats struct {
	pem       []byte
	jwks      []byte
	jwksErr   error
	spiffe    []byte
	spiffeErr error
}

func newFormats(b *bundle.Bundle, trustDomain string) (*formats, error) {
	f := &formats{pem: b.PEM()}
	var err error
	if f.jwks, err = b.JWKS(); err != nil {
		return nil, err
	}
	if trustDomain == "" {
		f.spiffeErr = ctrlerrors.WithReason(ReasonTrustDomainUnknown,
			ctrlerrors.BlockedErrorf("set spec.trustDomain or add a spire source to render the SPIFFE format"))
	} else if f.spiffe, err = b.SPIFFE(trustDomain); err != nil {
		return nil, err
	}
	return f, nil
}

// data returns the data of an object target: one entry per key it names.
func (f *formats) data(keys v1alpha1.Keys) (map[string][]byte, error) {
	if keys.PEM == "" && keys.SPIFFE == "" && keys.JWKS == "" {
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
	if len(out) != n {
		return nil, ctrlerrors.BlockedErrorf("target keys %+v must be distinct", keys)
	}
	return out, nil
}
