package metricsauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// issuerKeys tells which service account a token belongs to before any
// review, from the keys the API server signs service account tokens with
// (it publishes them at /openid/v1/jwks). The guard uses the answer only to
// choose a token's lane, never to let a request through: a token of a
// reader the API server allowed last time is reviewed in the readers' lane
// even when it is new (the kubelet replaces a pod's token about hourly),
// and a token that claims to be a reader's without its signature is not.
type issuerKeys struct {
	fetch func(ctx context.Context) ([]byte, error)
	now   func() time.Time
	// refetchAfter is the least time between two fetches (a token with an
	// unknown key ID asks for one).
	refetchAfter time.Duration

	mu      sync.Mutex
	keys    map[string]crypto.PublicKey
	fetched time.Time
	// fetching is held by the one fetch in flight.
	fetching sync.Mutex
}

// maxTokenLen bounds the tokens the guard parses; the API server's are a
// kilobyte or two.
const maxTokenLen = 16 << 10

// subject returns the sub claim of token when it is a JSON Web Token,
// unexpired, signed with one of the API server's keys; empty otherwise.
func (k *issuerKeys) subject(ctx context.Context, token string) string {
	if len(token) > maxTokenLen || strings.Count(token, ".") != 2 {
		return ""
	}
	parts := strings.SplitN(token, ".", 3)
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	var claims struct {
		Sub string `json:"sub"`
		Exp int64  `json:"exp"`
	}
	if decodeSegment(parts[0], &header) != nil || decodeSegment(parts[1], &claims) != nil || claims.Sub == "" {
		return ""
	}
	if claims.Exp != 0 && !k.now().Before(time.Unix(claims.Exp, 0)) {
		return ""
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return ""
	}
	key := k.key(ctx, header.Kid)
	if key == nil || !verify(header.Alg, key, parts[0]+"."+parts[1], sig) {
		return ""
	}
	return claims.Sub
}

// key returns the public key kid, fetching the keys again when it is not
// known and the last fetch is older than refetchAfter; nil when there is
// none (or another request is fetching).
func (k *issuerKeys) key(ctx context.Context, kid string) crypto.PublicKey {
	k.mu.Lock()
	key, due := k.keys[kid], k.fetched.IsZero() || k.now().Sub(k.fetched) >= k.refetchAfter
	k.mu.Unlock()
	if key != nil || !due || !k.fetching.TryLock() {
		return key
	}
	defer k.fetching.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	keys, err := k.load(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetched = k.now()
	if err == nil {
		k.keys = keys
	}
	return k.keys[kid]
}

// load fetches and decodes the API server's keys.
func (k *issuerKeys) load(ctx context.Context) (map[string]crypto.PublicKey, error) {
	raw, err := k.fetch(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch the service account issuer's keys: %w", err)
	}
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Crv string `json:"crv"`
			N   string `json:"n"`
			E   string `json:"e"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("decode the service account issuer's keys: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, j := range set.Keys {
		switch j.Kty {
		case "RSA":
			n, e := decodeInt(j.N), decodeInt(j.E)
			if n != nil && e != nil && e.IsInt64() && e.Int64() > 1 && e.Int64() < 1<<31 {
				keys[j.Kid] = &rsa.PublicKey{N: n, E: int(e.Int64())}
			}
		case "EC":
			x, y := decodeInt(j.X), decodeInt(j.Y)
			if j.Crv == "P-256" && x != nil && y != nil {
				keys[j.Kid] = &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
			}
		}
	}
	return keys, nil
}

// verify checks sig over signed with key for the JWS algorithms the API
// server signs with (RS256, ES256).
func verify(alg string, key crypto.PublicKey, signed string, sig []byte) bool {
	sum := sha256.Sum256([]byte(signed))
	switch pub := key.(type) {
	case *rsa.PublicKey:
		return alg == "RS256" && rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) == nil
	case *ecdsa.PublicKey:
		if alg != "ES256" || len(sig) != 64 {
			return false
		}
		return ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
	}
	return false
}

// decodeSegment decodes a base64url JSON segment of a token into v.
func decodeSegment(segment string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(segment)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// decodeInt decodes a base64url big-endian integer; nil when it is not one.
func decodeInt(s string) *big.Int {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) == 0 {
		return nil
	}
	return new(big.Int).SetBytes(raw)
}
