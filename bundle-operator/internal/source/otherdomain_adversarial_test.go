package source_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// federatedSpire is a SPIRE server of example.org holding one federated
// bundle.
type federatedSpire struct{ own, fed *spire.Bundle }

func (f federatedSpire) ServerBundle(context.Context) (*spire.Bundle, error) { return f.own, nil }
func (f federatedSpire) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	return map[string]*spire.Bundle{f.fed.TrustDomain: f.fed}, nil
}

// TestACAThatNamesAnotherTrustDomainNeverBecomesItsAuthority: the bundle
// SPIRE answers for its own trust domain, example.org, holds beside the
// server's CA a CA whose spiffe:// URI SAN names partner.test (a partner's
// CA appended to the local bundle by mistake, or an upstream authority's
// root shared with another trust domain). A SPIRE CA names its own trust
// domain, so this one is partner.test's. bundle-operator published it as
// an authority of example.org's SPIFFE document (keys.spiffe), and an SVID
// of example.org that partner.test's CA signed verified against it: the
// trust rule says other domains' CAs are published as their own
// documents, never merged into the local one. Seen failing: "Resolve()
// accepted a CA naming spiffe://partner.test as an authority of
// example.org ... verifies against keys.spiffe: true". The same holds for
// a federated trust domain's bundle holding a CA that names example.org.
// Now the source is refused with AuthorityOfAnotherTrustDomain, naming the domain,
// so nothing of it is published and the targets keep their last good
// bundle.
func TestACAThatNamesAnotherTrustDomainNeverBecomesItsAuthority(t *testing.T) {
	local := testpki.ValidCA("example.org SPIRE CA")
	partnerCA := testpki.ValidCA("partner.test SPIRE CA")
	naming := func(td string) testpki.CA {
		return testpki.TweakedCA(td+" SPIRE CA", func(c *x509.Certificate) {
			c.URIs = []*url.URL{{Scheme: "spiffe", Host: td}}
		})
	}
	for _, tc := range []struct {
		name      string
		spire     spire.Reader
		federated []string
		named     string
		leaf      string
	}{
		{
			name: "local bundle holding partner.test's CA",
			spire: fakeSpire{own: &spire.Bundle{TrustDomain: "example.org",
				X509Authorities: [][]byte{local.Cert.Raw, naming("partner.test").Cert.Raw}}},
			named: "partner.test",
		},
		{
			name: "federated bundle holding example.org's CA",
			spire: federatedSpire{
				own: &spire.Bundle{TrustDomain: "example.org", X509Authorities: [][]byte{local.Cert.Raw}},
				fed: &spire.Bundle{TrustDomain: "partner.test", X509Authorities: [][]byte{partnerCA.Cert.Raw, naming("example.org").Cert.Raw}},
			},
			federated: []string{"partner.test"},
			named:     "example.org",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := source.Resolver{Spire: tc.spire}
			res, err := r.Resolve(context.Background(), &v1alpha1.TrustBundleSpec{
				Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: tc.federated}}},
			})
			var se *source.Error
			if err == nil {
				doc, derr := res.Local.SPIFFE()
				t.Fatalf("Resolve() accepted a CA naming spiffe://%s (local document %q, %v)", tc.named, doc, derr)
			}
			if !errors.As(err, &se) || se.Reason != source.ReasonAuthorityOfAnotherTrustDomain || !strings.Contains(err.Error(), tc.named) {
				t.Errorf("Resolve() = %v, want %s naming %s", err, source.ReasonAuthorityOfAnotherTrustDomain, tc.named)
			}
		})
	}
}

// The CA of the trust domain itself, naming it in its URI SAN as SPIRE's
// CA does, is accepted and is an authority of its document.
func TestACAThatNamesItsOwnTrustDomainIsItsAuthority(t *testing.T) {
	own := testpki.TweakedCA("example.org SPIRE CA", func(c *x509.Certificate) {
		c.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org"}}
	})
	r := source.Resolver{Spire: fakeSpire{own: &spire.Bundle{TrustDomain: "example.org", X509Authorities: [][]byte{own.Cert.Raw}}}}
	res, err := r.Resolve(context.Background(), &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := res.Local.SPIFFE()
	if err != nil {
		t.Fatal(err)
	}
	b, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString("example.org"), doc)
	if err != nil {
		t.Fatal(err)
	}
	leaf := own.Leaf("spiffe://example.org/ns/prod/sa/payments")
	if _, _, err := x509svid.Verify([]*x509.Certificate{leaf}, b); err != nil {
		t.Errorf("an SVID of example.org its own CA signed does not verify against its document: %v", err)
	}
}
