package trustbundle

import (
	"crypto/x509"
	"testing"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestATargetOfOnlyFederatedDocumentsWithoutFederatedTrustDomainsIsRefused:
// a target whose only key is keys.federatedSpiffe, of a TrustBundle whose
// spire source lists no federated trust domain, would be written with no
// data at all: an empty target reported in sync. It must fail with a
// reason instead of succeeding silently.
func TestATargetOfOnlyFederatedDocumentsWithoutFederatedTrustDomainsIsRefused(t *testing.T) {
	ca := testpki.ValidCA("a")
	f := newFormats(spireContent("example.org", []*x509.Certificate{ca.Cert}, nil))
	data, err := f.data(v1alpha1.Keys{FederatedSPIFFE: "federated."})
	if err == nil && len(data) == 0 {
		t.Fatalf("data() = %v with no error: the target would hold no bundle at all", data)
	}
}

// TestTheLocalSPIFFEDocumentHoldsOnlyTheLocalAuthorities: the SPIFFE
// document of the local trust domain holds none of the CAs of federated
// trust domains or of PEM sources, though the PEM format holds them all.
func TestTheLocalSPIFFEDocumentHoldsOnlyTheLocalAuthorities(t *testing.T) {
	local, fed, cm := testpki.ValidCA("local"), testpki.ValidCA("fed"), testpki.ValidCA("cm")
	other := bundle.Domain{TrustDomain: "other.org", Bundle: bundle.New([]*x509.Certificate{fed.Cert}, nil)}
	c := spireContent("example.org", []*x509.Certificate{local.Cert}, nil, other)
	c.all = bundle.New(append(c.all.X509(), cm.Cert), nil)
	f := newFormats(c)
	data, err := f.data(v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe", FederatedSPIFFE: "federated."})
	if err != nil {
		t.Fatal(err)
	}
	want, err := bundle.New([]*x509.Certificate{local.Cert}, nil).SPIFFE("example.org")
	if err != nil {
		t.Fatal(err)
	}
	if string(data["bundle.spiffe"]) != string(want) {
		t.Fatalf("the local SPIFFE document is not exactly the local authorities:\n%s", data["bundle.spiffe"])
	}
	wantFed, err := other.SPIFFE()
	if err != nil {
		t.Fatal(err)
	}
	if string(data["federated.other.org"]) != string(wantFed) {
		t.Fatalf("the federated document is not exactly other.org's authorities:\n%s", data["federated.other.org"])
	}
}
