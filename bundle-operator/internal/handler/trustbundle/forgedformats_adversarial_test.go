package trustbundle

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// lastGood takes JWT authorities and the trust-domain mapping of X.509
// authorities from status.formats. A status writer adds a JWT key of theirs
// (or moves a CA into another trust domain's document): the first version
// of the fillNew gate (publishedMemory.vouchesFor) looked only at
// status.certificates, and new targets created while the sources fail got
// it. The gate now also holds the formats to what this process recorded.
func TestForgedFormatsDoNotPassTheLastGoodGate(t *testing.T) {
	a, fed := testpki.ValidCA("a"), testpki.ValidCA("fed")
	other := bundle.Domain{TrustDomain: "other.org", Bundle: bundle.New([]*x509.Certificate{fed.Cert}, nil)}
	st, _ := publishedStatus(t, spireContent("example.org", []*x509.Certificate{a.Cert}, jwtAuthorities(t), other))

	var memory publishedMemory
	uid := types.UID("tb")
	memory.record(uid, st.Certificates, st.Formats) // this process published exactly these
	if !memory.vouchesFor(uid, st.Certificates, st.Formats) {
		t.Fatal("the bundle this process published is not vouched for")
	}

	rogue, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&rogue.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	forged := st.DeepCopy()
	forged.Formats.JWTAuthorities = append(forged.Formats.JWTAuthorities, v1alpha1.PublishedJWTAuthority{KeyID: "attacker", PublicKey: der})
	// and: the federated CA now also vouches for example.org (and vice versa)
	forged.Formats.X509Authorities = append(forged.Formats.X509Authorities, forged.Formats.Federated[0].X509Authorities...)

	if memory.vouchesFor(uid, forged.Certificates, forged.Formats) {
		f, err := lastGood(forged, time.Now())
		if err != nil {
			t.Fatalf("lastGood refused the forged formats: %v", err)
		}
		data, err := f.data(allKeys)
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("a status whose formats add a JWT key and move a CA into example.org is vouched for; new targets would get: %s", data["jwks.json"])
	}
}

// A SPIRE authority this process published is never retained once SPIRE
// drops it (revocation). That origin was read from the status only
// (FromSPIRE marks and status.formats), which the status writer controls:
// erased, the CA was retained for the whole grace period. The process now
// remembers the marks it made.
func TestAForgedOriginRetainsNoRevokedSpireCA(t *testing.T) {
	now := time.Now()
	revoked, kept := testpki.ValidCA("revoked"), testpki.ValidCA("kept")
	c := spireContent("example.org", []*x509.Certificate{revoked.Cert, kept.Cert}, jwtAuthorities(t))
	st, _ := publishedStatus(t, c)
	markOrigins(st.Certificates, nil, st.Formats, func(string) bool { return false })

	var memory publishedMemory
	uid := types.UID("tb")
	memory.record(uid, st.Certificates, st.Formats)

	revokedSHA := bundle.NewCertificate(revoked.Cert).SHA256
	forged := st.DeepCopy()
	for i := range forged.Certificates {
		forged.Certificates[i].FromSPIRE = false
	}
	forged.Formats.X509Authorities = []string{bundle.NewCertificate(kept.Cert).SHA256}

	fromStatus := neverRetained(forged, true, func(string) bool { return false })
	never := func(sha string) bool { return fromStatus(sha) || memory.neverRetained(uid, sha) }
	// SPIRE revokes "revoked": the sources now hold only "kept".
	got, _ := retain(bundle.New([]*x509.Certificate{kept.Cert}, nil), memory.vouched(uid, forged.Certificates), never, time.Hour, false, now)
	if has(got, revoked) {
		t.Errorf("a CA SPIRE revoked (%s) stays published for the grace period because the status no longer marks it as SPIRE's", revokedSHA[:12])
	}
}
