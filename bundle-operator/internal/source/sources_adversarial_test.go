package source_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAdversarialAKeyOnlyInBinaryDataIsNotReadAsAnEmptySource: the source
// ConfigMap holds the key in binaryData (or in both data and a same-named
// binaryData entry is impossible, so binaryData only). The source must be
// refused as not found, never read as an empty or partial bundle.
func TestAdversarialAKeyOnlyInBinaryDataIsNotReadAsAnEmptySource(t *testing.T) {
	ca := testpki.ValidCA("cm")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "trusted", Name: "ca"},
		Data:       map[string]string{"other": ca.PEM()},
		BinaryData: map[string][]byte{"ca.crt": []byte(ca.PEM())}}
	r := source.Resolver{Reader: fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(cm).Build(), Namespaces: []string{"trusted"}}
	_, err := r.Resolve(context.Background(), &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{
		{ConfigMap: &v1alpha1.KeySelector{Namespace: "trusted", Name: "ca", Key: "ca.crt"}}}})
	var se *source.Error
	if !errors.As(err, &se) || se.Reason != source.ReasonNotFound {
		t.Fatalf("Resolve() = %v, want %s", err, source.ReasonNotFound)
	}
}

// TestAdversarialAFederatedNameThatIsTheLocalOneWithATrailingDotIsRefused: SPIRE
// (example.org) holds a federated bundle under "example.org." (a
// SpiffeFederation may name it: its pattern allows a trailing dot), filled
// from an outside bundle endpoint. Listed in federatedTrustDomains, it is
// published as a SPIFFE document named like the local trust domain in DNS
// terms, with the outside party's CA. Expected: TrustDomainMismatch, as for
// "example.org" itself.
func TestAdversarialAFederatedNameThatIsTheLocalOneWithATrailingDotIsRefused(t *testing.T) {
	local, outside := testpki.ValidCA("example.org"), testpki.ValidCA("outside")
	r := source.Resolver{Spire: &rotatingServers{
		bundles:   []*spire.Bundle{{TrustDomain: "example.org", X509Authorities: [][]byte{local.Cert.Raw}}},
		federated: map[string]*spire.Bundle{"example.org.": {TrustDomain: "example.org.", X509Authorities: [][]byte{outside.Cert.Raw}}},
	}}
	res, err := r.Resolve(context.Background(), &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"example.org."}}}}})
	if err == nil {
		if holds(res.Local, outside.Cert) {
			t.Fatal("the outside CA is in the local trust domain's document")
		}
		t.Fatalf("a federated trust domain %q was accepted beside the local %q (an outside CA published under the local name with a trailing dot)",
			res.Federated[0].TrustDomain, res.Local.TrustDomain)
	}
}
