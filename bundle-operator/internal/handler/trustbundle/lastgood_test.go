package trustbundle

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// allKeys names every format, as a target that wants them all does.
var allKeys = v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe", JWKS: "jwks.json", FederatedSPIFFE: "federated.",
	PKCS12: "truststore.p12", JKS: "truststore.jks", TrustStorePassword: "changeit"}

// spireContent is what a pass publishes from a spire source of trust domain
// td with the X.509 authorities certs and the JWT authorities jwt, and the
// federated trust domains fed.
func spireContent(td string, certs []*x509.Certificate, jwt []bundle.JWTAuthority, fed ...bundle.Domain) *content {
	all := certs
	for _, d := range fed {
		all = append(all, d.Bundle.X509()...)
	}
	return &content{
		all:       bundle.New(all, nil),
		local:     &bundle.Domain{TrustDomain: td, Bundle: bundle.New(certs, jwt)},
		federated: fed,
	}
}

// publishedStatus records c the way CreateOrUpdate does and returns the
// status as the API server hands it back (a JSON round trip), with the data
// a target of allKeys was written with.
func publishedStatus(t *testing.T, c *content) (*v1alpha1.TrustBundleStatus, map[string][]byte) {
	t.Helper()
	data, err := newFormats(c).data(allKeys)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := recordFormats(c)
	if err != nil {
		t.Fatal(err)
	}
	st := v1alpha1.TrustBundleStatus{Fingerprint: c.all.Fingerprint(), Certificates: published(c.all, nil), Formats: rec}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var out v1alpha1.TrustBundleStatus
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out, data
}

func jwtAuthorities(t *testing.T) []bundle.JWTAuthority {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ed, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return []bundle.JWTAuthority{{KeyID: "rsa", PublicKey: &rs.PublicKey}, {KeyID: "ec", PublicKey: &ec.PublicKey}, {KeyID: "ed", PublicKey: ed}}
}

// TestLastGoodRebuildsThePublishedBytes proves that the status alone
// rebuilds every format byte for byte, JWT authorities of each key type and
// the trust domain included, so a target created from it carries the same
// hash as the targets written when the bundle was published. Each trust
// domain's document is rebuilt from its own authorities only. (The SPIFFE
// document does not name its trust domain, but cannot be rendered without
// one: SPIRE may be down.)
func TestLastGoodRebuildsThePublishedBytes(t *testing.T) {
	a, b, fed := testpki.ValidCA("a"), testpki.ValidCA("b"), testpki.ValidCA("fed")
	other := bundle.Domain{TrustDomain: "other.org", Bundle: bundle.New([]*x509.Certificate{fed.Cert}, jwtAuthorities(t)[:1])}
	st, want := publishedStatus(t, spireContent("example.org", []*x509.Certificate{a.Cert, b.Cert}, jwtAuthorities(t), other))
	if len(want) != 6 || want["federated.other.org"] == nil || want["truststore.p12"] == nil {
		t.Fatalf("published %d keys, want the PEM, SPIFFE, JWKS, federated.other.org, PKCS#12 and JKS", len(want))
	}

	f, err := lastGood(st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.data(allKeys)
	if err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if !bytes.Equal(got[k], want[k]) {
			t.Errorf("%s rebuilt as\n%s\nwant\n%s", k, got[k], want[k])
		}
	}
	if target.Hash(got) != target.Hash(want) {
		t.Error("the rebuilt target hash differs from the published one")
	}
	for _, k := range []string{"jwks.json", "bundle.spiffe"} {
		if n := bytes.Count(got[k], []byte(`"kid":`)); n != 3 {
			t.Errorf("%s holds %d JWT authorities, want 3: %s", k, n, got[k])
		}
	}
}

// TestLastGoodRefusesWhatWasNotPublished proves that a status that does not
// describe one valid published bundle gives nothing: nothing published, a
// certificate that breaks the parsing rules, one that is not the recorded
// one, a set of certificates that is not the published fingerprint (added
// or lost), a certificate that is no CA, no CA valid any more, or an
// unreadable JWT authority.
func TestLastGoodRefusesWhatWasNotPublished(t *testing.T) {
	a, b, extra := testpki.ValidCA("a"), testpki.ValidCA("b"), testpki.ValidCA("extra")
	good, _ := publishedStatus(t, spireContent("example.org", []*x509.Certificate{a.Cert, b.Cert}, jwtAuthorities(t)))
	expired := testpki.ExpiredCA("expired")
	expiredStatus, _ := publishedStatus(t, spireContent("example.org", []*x509.Certificate{expired.Cert}, jwtAuthorities(t)))
	leaf := testpki.TweakedCA("leaf", func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature })
	leafStatus, _ := publishedStatus(t, spireContent("example.org", []*x509.Certificate{a.Cert, leaf.Cert}, jwtAuthorities(t)))

	cases := []struct {
		name   string
		status func() *v1alpha1.TrustBundleStatus
		want   string
	}{
		{"never published", func() *v1alpha1.TrustBundleStatus { return &v1alpha1.TrustBundleStatus{} }, errNeverPublished.Error()},
		{"a private key with a certificate", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Certificates[0].PEM += a.KeyPEM()
			return st
		}, bundle.ReasonPrivateKey},
		{"two certificates in one entry", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Certificates[0].PEM += extra.PEM()
			return st
		}, "holds 2 certificates"},
		{"a certificate that is not the recorded one", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Certificates[0].PEM = extra.PEM()
			return st
		}, "SHA-256"},
		{"a certificate added to the published ones", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Certificates = append(st.Certificates, published(bundle.New([]*x509.Certificate{extra.Cert}, nil), nil)...)
			return st
		}, "status.fingerprint is"},
		{"a certificate lost", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Certificates = st.Certificates[1:]
			return st
		}, "status.fingerprint is"},
		{"no CA valid now", func() *v1alpha1.TrustBundleStatus { return expiredStatus.DeepCopy() }, bundle.ReasonNoValidCA},
		// The status is the operator's, but whoever may write it could
		// put a leaf beside a CA, with a fingerprint to match; a source
		// could never have published it, so neither may the last good bundle.
		{"a certificate that is no CA", func() *v1alpha1.TrustBundleStatus { return leafStatus.DeepCopy() }, bundle.ReasonNotCA},
		{"an unreadable JWT authority", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Formats.JWTAuthorities[0].PublicKey = []byte("not a key")
			return st
		}, "jwtAuthorities[0]"},
		{"an X.509 authority that is not a published certificate", func() *v1alpha1.TrustBundleStatus {
			st := good.DeepCopy()
			st.Formats.X509Authorities[0] = bundle.NewCertificate(extra.Cert).SHA256
			return st
		}, "is not in status.certificates"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := lastGood(tc.status(), time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("lastGood() = %v (formats given: %t); want an error containing %q", err, f != nil, tc.want)
			}
		})
	}
	if _, err := lastGood(&v1alpha1.TrustBundleStatus{}, time.Now()); !errors.Is(err, errNeverPublished) {
		t.Errorf("an empty status gives %v, want errNeverPublished", err)
	}
}

// TestLastGoodWithoutRecordedFormats proves that a status written before
// status.formats existed still rebuilds the PEM format, which the
// certificates alone determine, and refuses the formats it cannot rebuild
// exactly instead of rendering them without JWT authorities.
func TestLastGoodWithoutRecordedFormats(t *testing.T) {
	a := testpki.ValidCA("a")
	published, want := publishedStatus(t, spireContent("example.org", []*x509.Certificate{a.Cert}, jwtAuthorities(t)))
	noFormats := published.DeepCopy()
	noFormats.Formats = nil
	// Written when the SPIFFE format held every certificate: the trust
	// domain and JWT authorities are recorded, its X.509 authorities not.
	merged := published.DeepCopy()
	merged.Formats.X509Authorities = nil

	for name, st := range map[string]*v1alpha1.TrustBundleStatus{"no status.formats": noFormats, "no X.509 authorities": merged} {
		f, err := lastGood(st, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := f.data(v1alpha1.Keys{PEM: "ca.crt"})
		if err != nil || !bytes.Equal(got["ca.crt"], want["ca.crt"]) {
			t.Fatalf("%s: PEM rebuilt as %q, %v; want %q", name, got["ca.crt"], err, want["ca.crt"])
		}
		for _, keys := range []v1alpha1.Keys{{JWKS: "jwks.json"}, {SPIFFE: "bundle.spiffe"}, {FederatedSPIFFE: "federated."}} {
			if _, err := f.data(keys); !errors.Is(err, errFormatsNotRecorded) {
				t.Errorf("%s: keys %+v: %v, want errFormatsNotRecorded", name, keys, err)
			}
		}
	}
}

// TestRecordFormatsIsStable proves that recording the same bundle twice
// gives the same status, so an unchanged pass does not write the status.
func TestRecordFormatsIsStable(t *testing.T) {
	fed := bundle.Domain{TrustDomain: "other.org", Bundle: bundle.New([]*x509.Certificate{testpki.ValidCA("f").Cert}, nil)}
	c := spireContent("example.org", []*x509.Certificate{testpki.ValidCA("a").Cert}, jwtAuthorities(t), fed)
	x, err := recordFormats(c)
	if err != nil {
		t.Fatal(err)
	}
	again := spireContent("example.org", c.local.Bundle.X509(), c.local.Bundle.JWTAuthorities(), fed)
	y, err := recordFormats(again)
	if err != nil {
		t.Fatal(err)
	}
	rx, _ := json.Marshal(x)
	ry, _ := json.Marshal(y)
	if !bytes.Equal(rx, ry) {
		t.Errorf("recorded\n%s\nthen\n%s", rx, ry)
	}
}
