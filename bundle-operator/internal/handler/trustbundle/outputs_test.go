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
