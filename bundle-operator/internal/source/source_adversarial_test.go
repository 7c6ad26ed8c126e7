package source_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// recordingReader hands out a tenant's ConfigMap and Secret holding a
// valid CA, and records every namespace it is asked to read from.
type recordingReader struct {
	mu    sync.Mutex
	reads []string
	pem   string
}

func (r *recordingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	r.reads = append(r.reads, key.Namespace)
	r.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		o.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: "7"}
		o.Data = map[string]string{"ca.crt": r.pem}
	case *corev1.Secret:
		o.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: "7"}
		o.Data = map[string][]byte{"ca.crt": []byte(r.pem)}
	case *metav1.PartialObjectMetadata:
		o.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: "7"}
	}
	return nil
}

func (r *recordingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not used")
}

// TestAdversarialATenantNamespaceNeverSuppliesTrust: a TrustBundle names a
// ConfigMap or Secret in a tenant's namespace (alone, after a valid source,
// or under a namespace name that only differs in case or spacing from an
// allowed one). Nothing of it may be published: the pass fails with
// SourceNamespaceNotAllowed and the tenant's object is never even read,
// neither by Resolve nor by the poller's Revision.
func TestAdversarialATenantNamespaceNeverSuppliesTrust(t *testing.T) {
	tenantCA := testpki.ValidCA("tenant")
	good := testpki.ValidCA("good")
	r := &recordingReader{pem: tenantCA.PEM()}
	res := &source.Resolver{Reader: r, Metadata: r, AllowSecrets: true, Namespaces: []string{"trusted"}}
	for _, ns := range []string{"tenant", "Trusted", "trusted ", " trusted", "trusted,tenant", ""} {
		for _, src := range []v1alpha1.Source{
			{ConfigMap: &v1alpha1.KeySelector{Namespace: ns, Name: "ca", Key: "ca.crt"}},
			{Secret: &v1alpha1.KeySelector{Namespace: ns, Name: "ca", Key: "ca.crt"}},
		} {
			spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{Inline: good.PEM()}, src}}
			out, err := res.Resolve(context.Background(), spec)
			var se *source.Error
			if !errors.As(err, &se) || se.Reason != source.ReasonNamespaceNotAllowed {
				n := 0
				if out != nil {
					n = len(out.Certificates)
				}
				t.Errorf("namespace %q: Resolve() = %d certificates, %v; want %s", ns, n, err, source.ReasonNamespaceNotAllowed)
			}
			if _, err := res.Revision(context.Background(), spec.Sources); err != nil {
				t.Errorf("namespace %q: Revision() = %v", ns, err)
			}
		}
	}
	if len(r.reads) != 0 {
		t.Fatalf("the operator read objects in namespaces %q that are not allowlisted", r.reads)
	}
}

// TestAdversarialNoSourcesIsRefused: Resolve of a spec with no source at all
// (spec.sources MinItems=1 holds only at admission) must fail rather than
// return an empty, "valid" result that the handler publishes as an empty
// bundle.
func TestAdversarialNoSourcesIsRefused(t *testing.T) {
	res := &source.Resolver{}
	out, err := res.Resolve(context.Background(), &v1alpha1.TrustBundleSpec{})
	if err == nil {
		t.Fatalf("Resolve() of no sources = %d certificates, local %v, no error: an empty bundle passes validation", len(out.Certificates), out.Local)
	}
}

// TestAdversarialFederatedAuthoritiesStayOutOfTheLocalDomain: a federated trust
// domain listed in two spire sources, and its CA also placed (by someone
// with rights on SPIRE's federated bundle only) under a JWT key ID the
// local domain uses: neither its X.509 nor its JWT authorities may reach
// the local trust domain's document; each federated domain is its own.
func TestAdversarialFederatedAuthoritiesStayOutOfTheLocalDomain(t *testing.T) {
	local, fed := testpki.ValidCA("example.org"), testpki.ValidCA("other.org")
	localKey, fedKey := testpki.ValidCA("k1"), testpki.ValidCA("k2")
	lk, err := x509MarshalPKIX(localKey)
	if err != nil {
		t.Fatal(err)
	}
	fk, err := x509MarshalPKIX(fedKey)
	if err != nil {
		t.Fatal(err)
	}
	r := source.Resolver{Spire: &rotatingServers{
		bundles: []*spire.Bundle{{TrustDomain: "example.org", X509Authorities: [][]byte{local.Cert.Raw},
			JWTAuthorities: []spire.JWTKey{{KeyID: "kid", PublicKey: lk}}}},
		federated: map[string]*spire.Bundle{
			"other.org": {TrustDomain: "other.org", X509Authorities: [][]byte{fed.Cert.Raw},
				JWTAuthorities: []spire.JWTKey{{KeyID: "kid", PublicKey: fk}}},
		},
	}}
	spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}},
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org", "other.org"}}},
	}}
	res, err := r.Resolve(context.Background(), spec)
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if holds(res.Local, fed.Cert) {
		t.Error("the local domain holds other.org's CA")
	}
	for _, a := range res.Local.Bundle.JWTAuthorities() {
		if !samePublicKey(a.PublicKey, localKey) {
			t.Errorf("the local domain's JWT authority %q is not the local key", a.KeyID)
		}
	}
	if len(res.Federated) != 1 || res.Federated[0].TrustDomain != "other.org" || holds(&res.Federated[0], local.Cert) {
		t.Errorf("federated = %v, want only other.org with its own CA", res.Federated)
	}
	_ = bundle.ReasonNoValidCA
}
