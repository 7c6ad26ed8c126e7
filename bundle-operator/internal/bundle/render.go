package bundle

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	"github.com/go-jose/go-jose/v4"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// PEM renders the certificates as concatenated CERTIFICATE blocks in bundle
// order, without headers.
func (b *Bundle) PEM() []byte {
	var out []byte
	for _, c := range b.certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.X509.Raw})...)
	}
	return out
}

// SPIFFE renders the bundle as a SPIFFE bundle document of trustDomain
// (go-spiffe's spiffebundle format), without sequence number or refresh hint
// so that the same content always renders the same bytes.
func (b *Bundle) SPIFFE(trustDomain string) ([]byte, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return nil, fmt.Errorf("trust domain %q of the SPIFFE format: %w", trustDomain, err)
	}
	if err := b.checkJWKs(); err != nil {
		return nil, err
	}
	sb := spiffebundle.FromX509Authorities(td, b.X509())
	for _, a := range b.jwt {
		if err := sb.AddJWTAuthority(a.KeyID, a.PublicKey); err != nil {
			return nil, fmt.Errorf("JWT authority %q: %w", a.KeyID, err)
		}
	}
	raw, err := sb.Marshal()
	if err != nil {
		return nil, fmt.Errorf("marshal SPIFFE bundle: %w", err)
	}
	return canonicalKeys(raw)
}

// canonicalKeys sorts the JWT keys of a marshalled SPIFFE bundle by key ID:
// spiffebundle keeps them in a map, so its output order varies between runs.
// X.509 keys keep bundle order and come first.
func canonicalKeys(raw []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("read SPIFFE bundle: %w", err)
	}
	var keys []json.RawMessage
	if err := json.Unmarshal(doc["keys"], &keys); err != nil {
		return nil, fmt.Errorf("read SPIFFE bundle keys: %w", err)
	}
	type ordered struct {
		x509 bool
		kid  string
	}
	meta := make(map[int]ordered, len(keys))
	for i, k := range keys {
		var m struct {
			Use string `json:"use"`
			Kid string `json:"kid"`
		}
		if err := json.Unmarshal(k, &m); err != nil {
			return nil, fmt.Errorf("read SPIFFE bundle key: %w", err)
		}
		meta[i] = ordered{x509: m.Use == "x509-svid", kid: m.Kid}
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ma, mb := meta[a], meta[b]
		switch {
		case ma.x509 && mb.x509:
			return a - b
		case ma.x509:
			return -1
		case mb.x509:
			return 1
		}
		return strings.Compare(ma.kid, mb.kid)
	})
	sorted := make([]json.RawMessage, len(keys))
	for i, j := range idx {
		sorted[i] = keys[j]
	}
	out, err := json.Marshal(sorted)
	if err != nil {
		return nil, fmt.Errorf("write SPIFFE bundle keys: %w", err)
	}
	doc["keys"] = out
	// encoding/json writes map keys sorted, so the document is canonical.
	return json.Marshal(doc)
}

// JWKS renders the JWT authorities as a JSON Web Key Set, sorted by key ID.
func (b *Bundle) JWKS() ([]byte, error) {
	if err := b.checkJWKs(); err != nil {
		return nil, err
	}
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(b.jwt))}
	for _, a := range b.jwt {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: a.PublicKey, KeyID: a.KeyID, Use: "sig"})
	}
	out, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("marshal JWKS: %w", err)
	}
	return out, nil
}

// checkJWKs returns an error naming the first JWT authority (by key ID and
// key type) that a JSON Web Key cannot hold, such as an X25519 key.
func (b *Bundle) checkJWKs() error {
	for _, a := range b.jwt {
		if _, err := json.Marshal(jose.JSONWebKey{Key: a.PublicKey, KeyID: a.KeyID, Use: "sig"}); err != nil {
			return fmt.Errorf("JWT authority %q holds a %T, which a JSON Web Key cannot hold: %w", a.KeyID, a.PublicKey, err)
		}
	}
	return nil
}
