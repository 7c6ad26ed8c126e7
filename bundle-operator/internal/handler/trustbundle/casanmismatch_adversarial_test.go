package trustbundle

import (
	"context"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAFederatedCANamingAnotherDomainStarvesNoNewTarget: a
// TrustBundle publishes example.org and its federated partner.test. The
// partner's bundle endpoint (which partner.test runs) starts serving, beside
// its CA, one whose spiffe:// URI SAN names third.test. The source is now
// refused; with the reason TrustDomainMismatch, which sourceFailed takes
// for "the spec names another trust domain than SPIRE's" and writes
// nothing, a target that was new while it lasted (a namespace that starts
// matching) was not given the last good bundle, as it is for any other
// content failure of a source (a non-CA in the partner's bundle, say): a
// partner stopped new namespaces from getting even the local trust
// domain's CAs (seen failing: the new target got ""). The refusal has a
// reason of its own now, AuthorityOfAnotherTrustDomain.
func TestAFederatedCANamingAnotherDomainStarvesNoNewTarget(t *testing.T) {
	h, applied := attackHandler(t)
	ctx := context.Background()
	naming := func(cn, td string) testpki.CA {
		return testpki.TweakedCA(cn, func(c *x509.Certificate) { c.URIs = []*url.URL{{Scheme: "spiffe", Host: td}} })
	}
	local, partner := naming("example.org CA", "example.org"), naming("partner.test CA", "partner.test")
	sp := &attackSpire{
		local:     &spire.Bundle{TrustDomain: "example.org", X509Authorities: ders(local)},
		federated: map[string]*spire.Bundle{"partner.test": {TrustDomain: "partner.test", X509Authorities: ders(partner)}},
	}
	h.Sources.Spire = sp
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"partner.test"}}}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
		},
	}
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	published, _ := applied()["team"]["ca.crt"].(string)
	if !strings.Contains(published, strings.TrimSpace(local.PEM())) {
		t.Fatalf("first pass published %q, want example.org's CA", published)
	}

	// partner.test's bundle now holds a CA naming third.test; a namespace
	// starts matching (the fake cache holds no target: "team" is new).
	sp.federated = map[string]*spire.Bundle{"partner.test": {TrustDomain: "partner.test",
		X509Authorities: ders(partner, naming("third.test CA", "third.test"))}}
	clear(applied())
	err := h.CreateOrUpdate(ctx, tb)
	if err == nil || !strings.Contains(err.Error(), "third.test") {
		t.Fatalf("pass = %v (reason %s), want the source refused for the CA naming third.test", err, ctrlerrors.Reason(err, ""))
	}
	if got, _ := applied()["team"]["ca.crt"].(string); got != published {
		t.Errorf("the new target got %q, want the last good bundle (as for any other refused content of a source); the pass said: %v", got, err)
	}
}
