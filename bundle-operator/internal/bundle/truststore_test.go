package bundle_test

import (
	"bytes"
	"crypto/x509"
	"testing"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestTrustStores proves the PKCS#12 and JKS renderings: read back with
// each format's own decoder they hold exactly the bundle's certificates as
// trusted entries, with or without a password; a wrong password is refused;
// and the same bundle renders the same bytes (an unchanged bundle writes
// nothing).
func TestTrustStores(t *testing.T) {
	a, c := testpki.ValidCA("a"), testpki.ValidCA("c")
	b := bundle.New([]*x509.Certificate{a.Cert, c.Cert}, nil)
	for _, password := range []string{"", "changeit"} {
		p12, err := b.PKCS12(password)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := bundle.New([]*x509.Certificate{c.Cert, a.Cert}, nil).PKCS12(password)
		if !bytes.Equal(p12, again) {
			t.Errorf("password %q: PKCS#12 differs between two renderings of one bundle", password)
		}
		got, err := pkcs12.DecodeTrustStore(p12, password)
		if err != nil || !sameCerts(got, b.X509()) {
			t.Errorf("password %q: PKCS#12 decodes to %d certificates, %v; want the bundle's 2", password, len(got), err)
		}
		if password != "" {
			if _, err := pkcs12.DecodeTrustStore(p12, "wrong"); err == nil {
				t.Error("PKCS#12 decoded with a wrong password")
			}
		}

		jks, err := b.JKS(password)
		if err != nil {
			t.Fatal(err)
		}
		jksAgain, _ := bundle.New([]*x509.Certificate{c.Cert, a.Cert}, nil).JKS(password)
		if !bytes.Equal(jks, jksAgain) {
			t.Errorf("password %q: JKS differs between two renderings of one bundle", password)
		}
		ks := keystore.New(keystore.WithMinPasswordLen(0))
		if err := ks.Load(bytes.NewReader(jks), []byte(password)); err != nil {
			t.Fatalf("password %q: load JKS: %v", password, err)
		}
		var loaded []*x509.Certificate
		for _, alias := range ks.Aliases() {
			e, err := ks.GetTrustedCertificateEntry(alias)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := x509.ParseCertificate(e.Certificate.Content)
			if err != nil {
				t.Fatal(err)
			}
			loaded = append(loaded, cert)
		}
		if !sameCerts(loaded, b.X509()) {
			t.Errorf("password %q: JKS holds %d certificates, want the bundle's 2", password, len(loaded))
		}
		if password != "" {
			if err := keystore.New().Load(bytes.NewReader(jks), []byte("wrong-password")); err == nil {
				t.Error("JKS loaded with a wrong password")
			}
		}
	}
}

// sameCerts reports whether got and want hold the same certificates.
func sameCerts(got, want []*x509.Certificate) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g.Equal(w)
		}
		if !found {
			return false
		}
	}
	return true
}
