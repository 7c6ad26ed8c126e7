package spiffefederation

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/common/pemcerts"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// desired is a validated SpiffeFederationSpec.
type desired struct {
	// relationship is the relationship without its bundle.
	relationship *types.FederationRelationship
	// bundle is the spec's trustDomainBundle; nil when it has none.
	bundle *types.Bundle
	// bundleSHA256 is the hex SHA-256 of the spec's trustDomainBundle; empty when it has none.
	bundleSHA256 string
}

// fieldError is a spec field that failed validation.
type fieldError struct {
	reason, field string
	err           error
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %v", e.field, e.err) }

// build validates spec into the relationship to hold. serverTD, when set,
// is the SPIRE server's own trust domain, with which it cannot federate.
func build(spec *v1alpha1.SpiffeFederationSpec, serverTD string) (*desired, *fieldError) {
	td, err := spiffeid.TrustDomainFromString(string(spec.TrustDomain))
	if err != nil {
		return nil, &fieldError{ReasonInvalidTrustDomain, "spec.trustDomain", err}
	}
	if serverTD != "" && strings.TrimSuffix(td.Name(), ".") == strings.TrimSuffix(serverTD, ".") {
		return nil, &fieldError{ReasonInvalidTrustDomain, "spec.trustDomain",
			fmt.Errorf("%q is the SPIRE server's own trust domain (a trailing dot names the same domain)", td.Name())}
	}
	if err := checkURL(spec.BundleEndpointURL); err != nil {
		return nil, &fieldError{ReasonInvalidBundleEndpointURL, "spec.bundleEndpointURL", err}
	}
	rel := &types.FederationRelationship{TrustDomain: td.Name(), BundleEndpointUrl: spec.BundleEndpointURL}
	switch spec.BundleEndpointProfile {
	case v1alpha1.ProfileHTTPSWeb:
		if spec.EndpointSPIFFEID != "" {
			return nil, &fieldError{ReasonInvalidEndpointSPIFFEID, "spec.endpointSPIFFEID",
				errors.New("not allowed with bundleEndpointProfile https_web")}
		}
		rel.BundleEndpointProfile = &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}
	case v1alpha1.ProfileHTTPSSPIFFE:
		id, err := spiffeid.FromString(spec.EndpointSPIFFEID)
		if err != nil {
			return nil, &fieldError{ReasonInvalidEndpointSPIFFEID, "spec.endpointSPIFFEID",
				fmt.Errorf("bundleEndpointProfile https_spiffe needs the endpoint's SPIFFE ID: %w", err)}
		}
		rel.BundleEndpointProfile = &types.FederationRelationship_HttpsSpiffe{
			HttpsSpiffe: &types.HTTPSSPIFFEProfile{EndpointSpiffeId: id.String()}}
	default:
		return nil, &fieldError{ReasonInvalidProfile, "spec.bundleEndpointProfile",
			fmt.Errorf("%q is neither https_web nor https_spiffe", spec.BundleEndpointProfile)}
	}
	d := &desired{relationship: rel}
	if spec.TrustDomainBundle != "" {
		if d.bundle, err = parseBundle(td, []byte(spec.TrustDomainBundle)); err != nil {
			return nil, &fieldError{ReasonInvalidTrustDomainBundle, "spec.trustDomainBundle", err}
		}
		sum := sha256.Sum256([]byte(spec.TrustDomainBundle))
		d.bundleSHA256 = hex.EncodeToString(sum[:])
	}
	return d, nil
}

// checkURL accepts what SPIRE accepts as a bundle endpoint URL: https, a
// host, no user info.
func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "https":
		return fmt.Errorf("%q is not an https URL", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case u.User != nil:
		return fmt.Errorf("%q must not carry user info", s)
	}
	return nil
}

// parseBundle reads a SPIFFE bundle (JWKS JSON) or PEM certificates into
// SPIRE's form. It refuses a bundle without any authority.
func parseBundle(td spiffeid.TrustDomain, data []byte) (*types.Bundle, error) {
	out := &types.Bundle{TrustDomain: td.Name()}
	var certs []*x509.Certificate
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := checkRefreshHint(trimmed); err != nil {
			return nil, err
		}
		b, err := spiffebundle.Parse(td, trimmed)
		if err != nil {
			return nil, fmt.Errorf("not a SPIFFE bundle: %w", err)
		}
		certs = b.X509Authorities()
		for keyID, key := range b.JWTAuthorities() {
			der, err := x509.MarshalPKIXPublicKey(key)
			if err != nil {
				return nil, fmt.Errorf("JWT authority %q: %w", keyID, err)
			}
			out.JwtAuthorities = append(out.JwtAuthorities, &types.JWTKey{PublicKey: der, KeyId: keyID})
		}
		if hint, ok := b.RefreshHint(); ok {
			out.RefreshHint = int64(hint.Seconds())
		}
		if seq, ok := b.SequenceNumber(); ok {
			out.SequenceNumber = seq
		}
	} else {
		// Strictly: a block that does not decode, a private key or text
		// between blocks refuses the whole bundle, where a lenient reader
		// would skip it and hand SPIRE the rest as the domain's authorities.
		parsed, err := pemcerts.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("neither a SPIFFE bundle (JSON) nor PEM certificates: %w", err)
		}
		certs = parsed
	}
	for _, c := range certs {
		out.X509Authorities = append(out.X509Authorities, &types.X509Certificate{Asn1: c.Raw})
	}
	if len(out.X509Authorities) == 0 && len(out.JwtAuthorities) == 0 {
		return nil, errors.New("the bundle holds no authority")
	}
	return out, nil
}

// checkRefreshHint refuses a SPIFFE bundle whose spiffe_refresh_hint is
// negative, or so large that go-spiffe's conversion to a time.Duration
// would wrap it (and SPIRE be given another hint than the spec's).
func checkRefreshHint(doc []byte) error {
	var raw struct {
		RefreshHint *int64 `json:"spiffe_refresh_hint"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil || raw.RefreshHint == nil {
		return nil // spiffebundle.Parse judges the document
	}
	if h := *raw.RefreshHint; h < 0 || h > math.MaxInt64/int64(time.Second) {
		return fmt.Errorf("spiffe_refresh_hint %d is out of range: give seconds from 0 to %d", h, math.MaxInt64/int64(time.Second))
	}
	return nil
}

// drift returns the mask of the fields in which have differs from want
// (the bundle aside: SPIRE keeps it fresh from the endpoint), nil when none.
func drift(have, want *types.FederationRelationship) *types.FederationRelationshipMask {
	m := &types.FederationRelationshipMask{
		BundleEndpointUrl:     have.GetBundleEndpointUrl() != want.GetBundleEndpointUrl(),
		BundleEndpointProfile: profileOf(have) != profileOf(want),
	}
	if !m.BundleEndpointUrl && !m.BundleEndpointProfile {
		return nil
	}
	return m
}

// profileOf returns the profile and endpoint SPIFFE ID of r as one string.
func profileOf(r *types.FederationRelationship) string {
	switch p := r.GetBundleEndpointProfile().(type) {
	case *types.FederationRelationship_HttpsWeb:
		return string(v1alpha1.ProfileHTTPSWeb)
	case *types.FederationRelationship_HttpsSpiffe:
		return string(v1alpha1.ProfileHTTPSSPIFFE) + " " + p.HttpsSpiffe.GetEndpointSpiffeId()
	}
	return ""
}

// sameAs reports whether have is exactly the relationship d describes: the
// same endpoint, profile and endpoint ID and, when d has a bundle, the same
// authorities.
func sameAs(have *types.FederationRelationship, d *desired) bool {
	if drift(have, d.relationship) != nil {
		return false
	}
	if d.bundle == nil {
		return true
	}
	return slices.Equal(authorityKeys(have.GetTrustDomainBundle()), authorityKeys(d.bundle))
}

// authorityKeys returns the X.509 and JWT authorities of b as sorted strings.
func authorityKeys(b *types.Bundle) []string {
	var out []string
	for _, a := range b.GetX509Authorities() {
		out = append(out, "x509:"+hex.EncodeToString(a.GetAsn1()))
	}
	for _, k := range b.GetJwtAuthorities() {
		out = append(out, "jwt:"+k.GetKeyId()+":"+hex.EncodeToString(k.GetPublicKey()))
	}
	slices.Sort(out)
	return out
}
