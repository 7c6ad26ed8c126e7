package trustbundle

import (
	"crypto/x509"
	"testing"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// unsupportedKey is a public key type neither JWKS nor SPIFFE can hold.
type unsupportedKey struct{}

// TestAFormatThatCannotRenderFailsOnlyItsTargets proves that a JWT
// authority a JWKS cannot hold fails only the targets naming the JWKS or
// SPIFFE format, with FormatNotRenderable; the PEM format (and with it
// injection) still renders.
func TestAFormatThatCannotRenderFailsOnlyItsTargets(t *testing.T) {
	ca := testpki.ValidCA("a")
	c := spireContent("example.org", []*x509.Certificate{ca.Cert}, []bundle.JWTAuthority{{KeyID: "odd", PublicKey: unsupportedKey{}}})
	f := newFormats(c)
	data, err := f.data(v1alpha1.Keys{PEM: "ca.crt"})
	if err != nil || string(data["ca.crt"]) != ca.PEM() {
		t.Fatalf("the PEM target got %q, %v; want the bundle", data["ca.crt"], err)
	}
	for _, keys := range []v1alpha1.Keys{{PEM: "ca.crt", JWKS: "jwks.json"}, {SPIFFE: "bundle.spiffe"}} {
		if _, err := f.data(keys); ctrlerrors.Reason(err, "") != ReasonFormatNotRenderable {
			t.Errorf("keys %+v: %v, want %s", keys, err, ReasonFormatNotRenderable)
		}
	}
}

// TestFormatKeys proves the key rules the CRD schema cannot check: a
// federated document whose key collides with another format's is refused
// with KeysCollide, and without a spire source the JWKS is an empty set
// while the SPIFFE formats fail with NoSpireSource.
func TestFormatKeys(t *testing.T) {
	ca, fed := testpki.ValidCA("a"), testpki.ValidCA("fed")
	other := bundle.Domain{TrustDomain: "other.org", Bundle: bundle.New([]*x509.Certificate{fed.Cert}, nil)}
	f := newFormats(spireContent("example.org", []*x509.Certificate{ca.Cert}, nil, other))
	if _, err := f.data(v1alpha1.Keys{PEM: "federated.other.org", FederatedSPIFFE: "federated."}); ctrlerrors.Reason(err, "") != ReasonKeysCollide {
		t.Errorf("colliding keys: %v, want %s", err, ReasonKeysCollide)
	}

	// Without a spire source there are no JWT authorities: the JWKS format
	// is refused like the SPIFFE ones, never written as an empty key set.
	noSpire := newFormats(&content{all: bundle.New([]*x509.Certificate{ca.Cert}, nil)})
	for _, keys := range []v1alpha1.Keys{{SPIFFE: "bundle.spiffe"}, {FederatedSPIFFE: "federated."}, {JWKS: "jwks.json"}, {PEM: "ca.crt", JWKS: "jwks.json"}} {
		if _, err := noSpire.data(keys); ctrlerrors.Reason(err, "") != ReasonNoSpireSource {
			t.Errorf("keys %+v without a spire source: %v, want %s", keys, err, ReasonNoSpireSource)
		}
	}
}
