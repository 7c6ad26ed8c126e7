package bundle_test

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestNewDeduplicatesAndSortsSoOrderDoesNotMatter proves the determinism
// rule: duplicates collapse and any input order renders the same bytes.
func TestNewDeduplicatesAndSortsSoOrderDoesNotMatter(t *testing.T) {
	a, b, c := testpki.ValidCA("a"), testpki.ValidCA("b"), testpki.ValidCA("c")
	jwtA, jwtB := bundle.JWTAuthority{KeyID: "k1", PublicKey: &a.Key.PublicKey}, bundle.JWTAuthority{KeyID: "k2", PublicKey: &b.Key.PublicKey}
	first := bundle.New([]*x509.Certificate{a.Cert, b.Cert, c.Cert, a.Cert}, []bundle.JWTAuthority{jwtA, jwtB})
	second := bundle.New([]*x509.Certificate{c.Cert, b.Cert, b.Cert, a.Cert}, []bundle.JWTAuthority{jwtB, jwtA, jwtA})

	if first.Len() != 3 {
		t.Fatalf("Len() = %d, want 3 after deduplication", first.Len())
	}
	if !bytes.Equal(first.PEM(), second.PEM()) {
		t.Error("PEM() differs between input orders")
	}
	if first.Fingerprint() != second.Fingerprint() {
		t.Error("Fingerprint() differs between input orders")
	}
	certs := first.Certificates()
	for i := 1; i < len(certs); i++ {
		if certs[i-1].SHA256 >= certs[i].SHA256 {
			t.Errorf("certificates not sorted by SHA-256 at %d", i)
		}
	}
	for range 20 { // spiffebundle keeps JWT keys in a map: repeat to catch map order
		s1, err := first.SPIFFE("example.org")
		if err != nil {
			t.Fatal(err)
		}
		s2, err := second.SPIFFE("example.org")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s1, s2) {
			t.Fatalf("SPIFFE() differs between runs:\n%s\n%s", s1, s2)
		}
		j1, _ := first.JWKS()
		j2, _ := second.JWKS()
		if !bytes.Equal(j1, j2) {
			t.Fatal("JWKS() differs between runs")
		}
	}
}

func TestSPIFFEFormatParsesWithGoSpiffe(t *testing.T) {
	a := testpki.ValidCA("a")
	b := bundle.New([]*x509.Certificate{a.Cert}, []bundle.JWTAuthority{{KeyID: "kid-1", PublicKey: &a.Key.PublicKey}})
	raw, err := b.SPIFFE("example.org")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString("example.org"), raw)
	if err != nil {
		t.Fatalf("spiffebundle.Parse() = %v", err)
	}
	if !sb.HasX509Authority(a.Cert) || !sb.HasJWTAuthority("kid-1") {
		t.Error("parsed SPIFFE bundle lacks the X.509 or JWT authority")
	}
	if _, ok := sb.SequenceNumber(); ok {
		t.Error("SPIFFE bundle carries a sequence number; it would make output change without content change")
	}
	if _, err := b.SPIFFE("not a trust domain!"); err == nil {
		t.Error("SPIFFE() accepted an invalid trust domain")
	}
}

func TestJWKSListsTheJWTAuthorities(t *testing.T) {
	a := testpki.ValidCA("a")
	raw, err := bundle.New(nil, []bundle.JWTAuthority{{KeyID: "z", PublicKey: &a.Key.PublicKey}, {KeyID: "y", PublicKey: &a.Key.PublicKey}}).JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
			Kty string `json:"kty"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].Kid != "y" || set.Keys[1].Kid != "z" || set.Keys[0].Kty != "EC" {
		t.Fatalf("JWKS() = %s, want keys y then z of type EC", raw)
	}
}

func TestDropExpiredAndEarliestExpiry(t *testing.T) {
	now := time.Now()
	valid, expired := testpki.ValidCA("v"), testpki.ExpiredCA("e")
	b := bundle.New([]*x509.Certificate{valid.Cert, expired.Cert}, nil)
	if got := b.EarliestExpiry(); !got.Equal(expired.Cert.NotAfter) {
		t.Errorf("EarliestExpiry() = %s, want %s", got, expired.Cert.NotAfter)
	}
	kept := b.DropExpired(now)
	if kept.Len() != 1 || !kept.X509()[0].Equal(valid.Cert) {
		t.Errorf("DropExpired() kept %d certificates, want only the valid one", kept.Len())
	}
}

// TestDropExpiredDropsExpiredJWTAuthorities proves that dropExpired also
// drops JWT authorities past their expiry and keeps those without one.
func TestDropExpiredDropsExpiredJWTAuthorities(t *testing.T) {
	now := time.Now()
	key := &testpki.ValidCA("k").Key.PublicKey
	b := bundle.New(nil, []bundle.JWTAuthority{
		{KeyID: "expired", PublicKey: key, ExpiresAt: now.Add(-time.Second)},
		{KeyID: "later", PublicKey: key, ExpiresAt: now.Add(time.Hour)},
		{KeyID: "never", PublicKey: key},
	})
	var kept []string
	for _, a := range b.DropExpired(now).JWTAuthorities() {
		kept = append(kept, a.KeyID)
	}
	if strings.Join(kept, ",") != "later,never" {
		t.Errorf("DropExpired() kept %v, want later and never", kept)
	}
}
