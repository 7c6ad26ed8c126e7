package source_test

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"testing"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// rotatingServers answers each ServerBundle call with the next bundle in
// turn, as round-robin reads over several servers do.
type rotatingServers struct {
	mu        sync.Mutex
	n         int
	bundles   []*spire.Bundle
	federated map[string]*spire.Bundle
}

func (r *rotatingServers) ServerBundle(context.Context) (*spire.Bundle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bundles[r.n%len(r.bundles)]
	r.n++
	return b, nil
}

func (r *rotatingServers) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	if r.federated == nil {
		return map[string]*spire.Bundle{}, nil
	}
	return r.federated, nil
}

// holds reports whether d's X.509 authorities include cert.
func holds(d *bundle.Domain, cert *x509.Certificate) bool {
	for _, c := range d.Bundle.X509() {
		if c.Equal(cert) {
			return true
		}
	}
	return false
}

// TestTwoSpireReadsOfDifferentTrustDomainsAreNeverMergedIntoOne: two spire
// sources read the server's bundle twice; if the reads come from servers of
// two trust domains (a server list that mixes trust domains), the second
// trust domain's CA must not become an authority of the first one's SPIFFE
// document: it would then verify SVIDs of the first trust domain.
func TestTwoSpireReadsOfDifferentTrustDomainsAreNeverMergedIntoOne(t *testing.T) {
	local, other := testpki.ValidCA("example.org"), testpki.ValidCA("other.org")
	r := source.Resolver{Spire: &rotatingServers{bundles: []*spire.Bundle{
		{TrustDomain: "example.org", X509Authorities: [][]byte{local.Cert.Raw}},
		{TrustDomain: "other.org", X509Authorities: [][]byte{other.Cert.Raw}},
	}}}
	spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}, {SPIRE: &v1alpha1.SPIRESource{}}}}
	res, err := r.Resolve(context.Background(), spec)
	if err != nil {
		return // refused: nothing published
	}
	if holds(res.Local, other.Cert) {
		t.Fatalf("the local trust domain %s holds the CA read as other.org's: %d authorities", res.Local.TrustDomain, res.Local.Bundle.Len())
	}
}

// TestAFederatedBundleAnsweredUnderTheLocalNameIsRefused: SPIRE lists a
// federated bundle under a requested name whose content names the local
// trust domain. The federated document then would claim to speak for the
// local trust domain with another CA.
func TestAFederatedBundleAnsweredUnderTheLocalNameIsRefused(t *testing.T) {
	local, other := testpki.ValidCA("example.org"), testpki.ValidCA("other.org")
	r := source.Resolver{Spire: &rotatingServers{
		bundles: []*spire.Bundle{{TrustDomain: "example.org", X509Authorities: [][]byte{local.Cert.Raw}}},
		federated: map[string]*spire.Bundle{
			"other.org": {TrustDomain: "example.org", X509Authorities: [][]byte{other.Cert.Raw}},
		},
	}}
	spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}}}}
	res, err := r.Resolve(context.Background(), spec)
	if err != nil {
		return
	}
	for _, d := range res.Federated {
		if d.TrustDomain == res.Local.TrustDomain {
			t.Fatalf("a federated document names the local trust domain %s with a CA SPIRE listed for other.org", d.TrustDomain)
		}
	}
	if holds(res.Local, other.Cert) {
		t.Fatal("the local trust domain holds the federated CA")
	}
}

// TestAnExpiredFederatedDomainIsNotRescuedByTheLocalOne: the validity rule
// is checked per trust domain, so a valid local CA does not let an
// all-expired federated trust domain through.
func TestAnExpiredFederatedDomainIsNotRescuedByTheLocalOne(t *testing.T) {
	local, expired := testpki.ValidCA("example.org"), testpki.ExpiredCA("old.org")
	r := source.Resolver{Spire: &rotatingServers{
		bundles:   []*spire.Bundle{{TrustDomain: "example.org", X509Authorities: [][]byte{local.Cert.Raw}}},
		federated: map[string]*spire.Bundle{"old.org": {TrustDomain: "old.org", X509Authorities: [][]byte{expired.Cert.Raw}}},
	}}
	spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"old.org"}}}}}
	_, err := r.Resolve(context.Background(), spec)
	var se *source.Error
	if !errors.As(err, &se) || se.Reason != bundle.ReasonNoValidCA {
		t.Fatalf("Resolve() = %v, want %s", err, bundle.ReasonNoValidCA)
	}
}
