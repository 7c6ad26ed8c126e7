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
	"github.com/trustplane/trustplane/common/x509ca"
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
	// x509Authorities are the bundle's X.509 authorities, parsed.
	x509Authorities []*x509.Certificate
}

// writableAt returns an error unless the spec's bundle may be written to
// SPIRE at now: when it holds X.509 authorities, one of them must be valid
// then. A bundle of expired or not yet valid CAs breaks every handshake
// with the domain (and with https_spiffe, the endpoint's own) from the
// moment SPIRE holds it. It is judged when the bundle is written, not in
// every pass: once written, SPIRE keeps it fresh from the endpoint.
func (d *desired) writableAt(now time.Time) error {
	if len(d.x509Authorities) == 0 {
		return nil
	}
	for _, c := range d.x509Authorities {
		if x509ca.ValidAt(c, now) {
			return nil
		}
	}
	return fmt.Errorf("none of its %d X.509 authorities is valid at %s: give the domain's current CAs",
		len(d.x509Authorities), now.UTC().Format(time.RFC3339))
}

// fieldError is a spec field that failed validation.
type fieldError struct {
	reason, field string
	err           error
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %v", e.field, e.err) }

// build validates spec into the relationship to hold: read, then the rules
// its start bundle's authorities must meet (checkAuthorities). serverTD,
// when set, is the SPIRE server's own trust domain, with which it cannot
// federate.
func build(spec *v1alpha1.SpiffeFederationSpec, serverTD string) (*desired, *fieldError) {
	d, fe := read(spec, serverTD)
	if fe != nil {
		return nil, fe
	}
	if err := checkAuthorities(spec, d); err != nil {
		return nil, &fieldError{ReasonInvalidTrustDomainBundle, "spec.trustDomainBundle", err}
	}
	return d, nil
}

// checkAuthorities applies to the start bundle of d the rules an authority
// must meet: every X.509 authority is a CA and names no other trust domain
// than the spec's in a spiffe:// URI SAN (a SPIRE CA names its own), and
// with https_spiffe served from the federated domain itself there is an
// X.509 authority to authenticate the endpoint with.
func checkAuthorities(spec *v1alpha1.SpiffeFederationSpec, d *desired) error {
	if d.bundle == nil {
		return nil
	}
	td := d.relationship.TrustDomain
	for i, c := range d.x509Authorities {
		if !x509ca.IsCA(c) {
			return fmt.Errorf("X.509 authority %d (%s) is not a CA: basic constraints are absent or CA:FALSE, or its key usage leaves out keyCertSign", i+1, c.Subject)
		}
		if other := x509ca.OtherTrustDomains(c, td); len(other) > 0 {
			return fmt.Errorf("X.509 authority %d (%s) names the trust domain %s in its SPIFFE ID, not %s: a trust domain's bundle holds only its own CAs",
				i+1, c.Subject, other[0], td)
		}
	}
	if spec.BundleEndpointProfile == v1alpha1.ProfileHTTPSSPIFFE && len(d.x509Authorities) == 0 {
		// SPIRE authenticates the endpoint with the bundle of the endpoint
		// ID's trust domain: only when that is this domain must the start
		// bundle hold an X.509 authority.
		if id, err := spiffeid.FromString(spec.EndpointSPIFFEID); err == nil && id.TrustDomain().Name() == td {
			return errors.New("bundleEndpointProfile https_spiffe authenticates the endpoint, whose SPIFFE ID is in this trust domain, with the bundle's X.509 authorities, and this bundle has none")
		}
	}
	return nil
}

// read parses spec into the relationship it describes, with the checks its
// fields need to be read at all; Delete reads with it, so an object whose
// bundle a later rule refuses still deletes what it created.
func read(spec *v1alpha1.SpiffeFederationSpec, serverTD string) (*desired, *fieldError) {
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
		if d.bundle, d.x509Authorities, err = parseBundle(td, []byte(spec.TrustDomainBundle)); err != nil {
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
// SPIRE's form, and returns its X.509 authorities parsed too. It refuses a
// bundle without any authority, and a SPIFFE bundle checkKeys refuses.
func parseBundle(td spiffeid.TrustDomain, data []byte) (*types.Bundle, []*x509.Certificate, error) {
	out := &types.Bundle{TrustDomain: td.Name()}
	var certs []*x509.Certificate
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := checkRefreshHint(trimmed); err != nil {
			return nil, nil, err
		}
		if err := checkKeys(trimmed); err != nil {
			return nil, nil, err
		}
		b, err := spiffebundle.Parse(td, trimmed)
		if err != nil {
			return nil, nil, fmt.Errorf("not a SPIFFE bundle: %w", err)
		}
		certs = b.X509Authorities()
		for keyID, key := range b.JWTAuthorities() {
			der, err := x509.MarshalPKIXPublicKey(key)
			if err != nil {
				return nil, nil, fmt.Errorf("JWT authority %q: %w", keyID, err)
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
			return nil, nil, fmt.Errorf("neither a SPIFFE bundle (JSON) nor PEM certificates: %w", err)
		}
		certs = parsed
	}
	for _, c := range certs {
		out.X509Authorities = append(out.X509Authorities, &types.X509Certificate{Asn1: c.Raw})
	}
	if len(out.X509Authorities) == 0 && len(out.JwtAuthorities) == 0 {
		return nil, nil, errors.New("the bundle holds no authority")
	}
	return out, certs, nil
}

// checkKeys refuses a SPIFFE bundle that go-spiffe would read as less than
// it holds: a key whose use is neither x509-svid nor jwt-svid (go-spiffe
// skips it without a word), two JWT authorities of one key ID (it keeps
// the last), and a key carrying private members, which must never be
// published and which the PEM form refuses too.
func checkKeys(doc []byte) error {
	var raw struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil // spiffebundle.Parse judges the document
	}
	kids := map[string]bool{}
	for i, k := range raw.Keys {
		for _, private := range []string{"d", "p", "q", "dp", "dq", "qi", "k"} {
			if _, ok := k[private]; ok {
				return fmt.Errorf("keys[%d] holds the private or secret key member %q: a bundle holds public keys only", i, private)
			}
		}
		var use, kid string
		_ = json.Unmarshal(k["use"], &use)
		_ = json.Unmarshal(k["kid"], &kid)
		switch use {
		case "x509-svid":
		case "jwt-svid":
			if kids[kid] {
				return fmt.Errorf("keys[%d]: two JWT authorities have the key ID %q", i, kid)
			}
			kids[kid] = true
		default:
			return fmt.Errorf("keys[%d] has use %q: a SPIFFE bundle's keys are x509-svid or jwt-svid", i, use)
		}
	}
	return nil
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
