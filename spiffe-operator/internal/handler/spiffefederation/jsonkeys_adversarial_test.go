package spiffefederation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// TestAdversarialJSONMemberTricksNeverDropAKeySilently: checkKeys reads each key
// with encoding/json into a map (exact member names, last duplicate wins),
// go-spiffe with go-jose. A document the two read differently (a duplicate
// member, a member in other case, an escaped name) must be refused or read
// whole: every key object becomes an authority, never one fewer.
func TestAdversarialJSONMemberTricksNeverDropAKeySilently(t *testing.T) {
	ca, _ := selfSigned(t, func(*x509.Certificate) {})
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	base := keysDoc(t, x509Key(ca, "x509-svid"), jwkOf(&k1.PublicKey, "jwt-svid", "k1", nil), jwkOf(&k2.PublicKey, "jwt-svid", "k2", nil))
	td := spiffeid.RequireTrustDomainFromString("example.org")
	cases := map[string]string{
		"duplicate use, bogus last":     strings.Replace(base, `"use":"jwt-svid"`, `"use":"jwt-svid","use":"bogus"`, 1),
		"duplicate use, bogus first":    strings.Replace(base, `"use":"jwt-svid"`, `"use":"bogus","use":"jwt-svid"`, 1),
		"upper-case USE after use":      strings.Replace(base, `"use":"jwt-svid"`, `"use":"jwt-svid","USE":"bogus"`, 1),
		"upper-case USE alone":          strings.Replace(base, `"use":"jwt-svid"`, `"USE":"jwt-svid"`, 1),
		"escaped use name":              strings.Replace(base, `"use":"jwt-svid"`, `"\u0075se":"bogus"`, 1),
		"kid upper-case duplicate":      strings.Replace(base, `"kid":"k2"`, `"kid":"k2","KID":"k1"`, 1),
		"kid escaped duplicate":         strings.Replace(base, `"kid":"k2"`, `"\u006bid":"k1"`, 1),
		"second keys member other case": strings.TrimSuffix(base, "}") + `,"KEYS":[{"kty":"EC","use":"bogus"}]}`,
		"duplicate keys member":         strings.TrimSuffix(base, "}") + `,"keys":[{"kty":"EC","use":"bogus"}]}`,
		"private D upper-case":          strings.Replace(base, `"kid":"k1"`, `"kid":"k1","D":"AAAA"`, 1),
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if doc == base {
				t.Fatal("case did not change the document")
			}
			b, x, err := parseBundle(td, []byte(doc))
			if err != nil {
				t.Logf("refused: %v", err)
				return
			}
			if got := len(b.X509Authorities) + len(b.JwtAuthorities); got != 3 || len(x) != 1 {
				t.Errorf("accepted with %d authorities (%d X.509, %d JWT) of the 3 keys the document holds", got, len(b.X509Authorities), len(b.JwtAuthorities))
			}
		})
	}
}
