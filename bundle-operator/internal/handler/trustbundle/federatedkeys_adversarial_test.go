package trustbundle

import (
	"crypto/x509"
	"testing"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAdversarialAFederatedDocumentNeverTakesAnotherFormatsKey: a federated trust
// domain's name picked so that <prefix><trust domain> is the key of another
// format of the same target: the local SPIFFE document, the JWKS, or a
// binary trust store (which a ConfigMap holds in binaryData, so a plain
// map overwrite would leave one format written under the other's name).
// Trust: another domain's document must never stand where the local one
// (or a store of every CA) is expected. Expected: KeysCollide every time,
// nothing rendered.
func TestAdversarialAFederatedDocumentNeverTakesAnotherFormatsKey(t *testing.T) {
	ca, fed := testpki.ValidCA("local"), testpki.ValidCA("fed")
	jwt := []bundle.JWTAuthority{{KeyID: "k1", PublicKey: ca.Cert.PublicKey}}
	for name, tc := range map[string]struct {
		td   string
		keys v1alpha1.Keys
	}{
		"the local SPIFFE key":  {"spiffe", v1alpha1.Keys{SPIFFE: "bundle.spiffe", FederatedSPIFFE: "bundle."}},
		"the JWKS key":          {"json", v1alpha1.Keys{PEM: "ca.crt", JWKS: "jwks.json", FederatedSPIFFE: "jwks."}},
		"the PKCS#12 key":       {"p12", v1alpha1.Keys{PEM: "ca.crt", PKCS12: "truststore.p12", FederatedSPIFFE: "truststore."}},
		"the JKS key":           {"jks", v1alpha1.Keys{PEM: "ca.crt", JKS: "truststore.jks", FederatedSPIFFE: "truststore."}},
		"the PEM key (default)": {"crt", v1alpha1.Keys{PEM: "ca.crt", FederatedSPIFFE: "ca."}},
	} {
		other := bundle.Domain{TrustDomain: tc.td, Bundle: bundle.New([]*x509.Certificate{fed.Cert}, nil)}
		f := newFormats(spireContent("example.org", []*x509.Certificate{ca.Cert}, jwt, other))
		data, err := f.data(tc.keys)
		if ctrlerrors.Reason(err, "") != ReasonKeysCollide {
			t.Errorf("%s: a federated trust domain %q rendered %d keys (err %v), want %s", name, tc.td, len(data), err, ReasonKeysCollide)
		}
	}
}
