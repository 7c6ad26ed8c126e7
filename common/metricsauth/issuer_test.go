package metricsauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
)

// b64 is base64url without padding, as JSON Web Tokens use.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// signed makes a token of header and claims signed by key (RS256 for an
// RSA key, ES256 for an ECDSA one).
func signed(t *testing.T, key crypto.Signer, header, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	input := b64(h) + "." + b64(c)
	sum := sha256.Sum256([]byte(input))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:]); err != nil {
			t.Fatal(err)
		}
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	}
	return input + "." + b64(sig)
}

// jwks publishes the public keys of keys by key ID.
func jwks(keys map[string]crypto.Signer) []byte {
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for kid, key := range keys {
		switch k := key.Public().(type) {
		case *rsa.PublicKey:
			set.Keys = append(set.Keys, map[string]string{"kty": "RSA", "kid": kid, "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
		case *ecdsa.PublicKey:
			set.Keys = append(set.Keys, map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(k.X.FillBytes(make([]byte, 32))), "y": b64(k.Y.FillBytes(make([]byte, 32)))})
		}
	}
	raw, _ := json.Marshal(set)
	return raw
}

// TestTheIssuerTellsASubjectOnlyUnderItsSignature checks subject against
// tokens signed and forged in every way the guard meets: only a token
// signed with a published key, by the algorithm of that key, unexpired,
// names its subject.
func TestTheIssuerTellsASubjectOnlyUnderItsSignature(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	fetches := 0
	k := &issuerKeys{now: func() time.Time { return now }, refetchAfter: time.Minute, fetch: func(context.Context) ([]byte, error) {
		fetches++
		return jwks(map[string]crypto.Signer{"rsa": rsaKey, "ec": ecKey}), nil
	}}
	const sub = "system:serviceaccount:monitoring:prometheus"
	live := map[string]any{"sub": sub, "exp": now.Add(time.Hour).Unix()}
	valid := signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "rsa"}, live)
	for name, c := range map[string]struct {
		token string
		want  string
	}{
		"RS256 under its key":                 {valid, sub},
		"ES256 under its key":                 {signed(t, ecKey, map[string]any{"alg": "ES256", "kid": "ec"}, live), sub},
		"no exp":                              {signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "rsa"}, map[string]any{"sub": sub}), sub},
		"expired":                             {signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "rsa"}, map[string]any{"sub": sub, "exp": now.Unix()}), ""},
		"another key, same kid":               {signed(t, other, map[string]any{"alg": "RS256", "kid": "rsa"}, live), ""},
		"the EC key's kid, RS256":             {signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "ec"}, live), ""},
		"alg none":                            {b64([]byte(`{"alg":"none","kid":"rsa"}`)) + "." + b64([]byte(`{"sub":"`+sub+`"}`)) + ".", ""},
		"HS256 with the public key as secret": {signed(t, rsaKey, map[string]any{"alg": "HS256", "kid": "rsa"}, live), ""},
		"claims swapped under a valid signature": {func() string {
			parts := splitToken(valid)
			return parts[0] + "." + b64([]byte(`{"sub":"system:serviceaccount:tenant:app"}`)) + "." + parts[2]
		}(), ""},
		"no sub":      {signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "rsa"}, map[string]any{"exp": now.Add(time.Hour).Unix()}), ""},
		"not a JWT":   {"made-up-token", ""},
		"four parts":  {valid + ".x", ""},
		"bad base64":  {"!!." + splitToken(valid)[1] + "." + splitToken(valid)[2], ""},
		"too long":    {valid + string(make([]byte, maxTokenLen)), ""},
		"unknown kid": {signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "gone"}, live), ""},
	} {
		if got := k.subject(context.Background(), c.token); got != c.want {
			t.Errorf("%s: subject %q, want %q", name, got, c.want)
		}
	}
	// One fetch served them all: an unknown key ID fetches again at most
	// once a refetchAfter.
	if fetches != 1 {
		t.Errorf("%d fetches of the keys, want 1", fetches)
	}
	now = now.Add(time.Minute)
	if got := k.subject(context.Background(), signed(t, rsaKey, map[string]any{"alg": "RS256", "kid": "gone"}, live)); got != "" || fetches != 2 {
		t.Errorf("an unknown key ID after refetchAfter: subject %q, %d fetches, want none and 2", got, fetches)
	}
}

// TestTheIssuerKeepsItsKeysWhenAFetchFails: a failed fetch leaves the keys
// it had, and no request waits on another's fetch.
func TestTheIssuerKeepsItsKeysWhenAFetchFails(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	fail := false
	k := &issuerKeys{now: func() time.Time { return now }, refetchAfter: time.Minute, fetch: func(context.Context) ([]byte, error) {
		if fail {
			return nil, errors.New("the API server is away")
		}
		return jwks(map[string]crypto.Signer{"k": key}), nil
	}}
	token := signed(t, key, map[string]any{"alg": "RS256", "kid": "k"}, map[string]any{"sub": "u"})
	if got := k.subject(context.Background(), token); got != "u" {
		t.Fatalf("subject %q, want u", got)
	}
	fail, now = true, now.Add(time.Hour)
	_ = k.subject(context.Background(), signed(t, key, map[string]any{"alg": "RS256", "kid": "other"}, map[string]any{"sub": "u"}))
	if got := k.subject(context.Background(), token); got != "u" {
		t.Errorf("after a failed fetch, subject %q, want u from the keys kept", got)
	}
	k.fetching.Lock() // another request is fetching
	defer k.fetching.Unlock()
	now = now.Add(time.Hour)
	done := make(chan string, 1)
	go func() {
		done <- k.subject(context.Background(), signed(t, key, map[string]any{"alg": "RS256", "kid": "other"}, map[string]any{"sub": "u"}))
	}()
	select {
	case got := <-done:
		if got != "" {
			t.Errorf("an unknown key ID while another fetches: subject %q, want none", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request waited on another's fetch")
	}
}

// splitToken returns the three parts of a token.
func splitToken(token string) []string { return strings.SplitN(token, ".", 3) }
