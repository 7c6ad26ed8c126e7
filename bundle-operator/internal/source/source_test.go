package source_test

import (
	"context"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

type fakeSpire struct {
	own       *spire.Bundle
	federated map[string]*spire.Bundle
	err       error
}

func (f *fakeSpire) ServerBundle(context.Context) (*spire.Bundle, error) { return f.own, f.err }
func (f *fakeSpire) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	return f.federated, f.err
}

// TestResolveNamesTheFailingSourceAndReason proves that every source is
// validated on its own and that a failure names the source and a reason.
func TestResolveNamesTheFailingSourceAndReason(t *testing.T) {
	good := testpki.ValidCA("good")
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"ca": good.PEM(), "key": good.KeyPEM()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"ca": []byte(good.PEM())}},
	).Build()
	spireUp := &fakeSpire{own: &spire.Bundle{TrustDomain: "example.org", X509Authorities: [][]byte{good.Cert.Raw}}, federated: map[string]*spire.Bundle{}}
	cm := func(key string) v1alpha1.Source {
		return v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: "ns", Name: "cm", Key: key}}
	}
	cases := []struct {
		name         string
		resolver     source.Resolver
		sources      []v1alpha1.Source
		reason       string
		transient    bool
		sourceNaming string
	}{
		{"ConfigMap missing", source.Resolver{Reader: reader}, []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: "ns", Name: "nope", Key: "ca"}}}, source.ReasonNotFound, false, "sources[0] (configMap ns/nope key ca)"},
		{"key missing", source.Resolver{Reader: reader}, []v1alpha1.Source{cm("ca"), cm("nope")}, source.ReasonNotFound, false, "sources[1]"},
		{"private key in a ConfigMap", source.Resolver{Reader: reader}, []v1alpha1.Source{cm("key")}, bundle.ReasonPrivateKey, false, "sources[0]"},
		{"Secrets not allowed", source.Resolver{Reader: reader}, []v1alpha1.Source{{Secret: &v1alpha1.KeySelector{Namespace: "ns", Name: "s", Key: "ca"}}}, source.ReasonSecretsDisabled, false, "sources[0] (secret ns/s key ca)"},
		{"SPIRE not configured", source.Resolver{Reader: reader}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}, source.ReasonSpireNotConfigured, false, "sources[0] (spire)"},
		{"SPIRE down", source.Resolver{Reader: reader, Spire: &fakeSpire{err: errors.New("connection refused")}}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}, source.ReasonSpireUnavailable, true, "sources[0]"},
		{"federated bundle missing", source.Resolver{Reader: reader, Spire: spireUp}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}}}, source.ReasonFederatedBundleNotFound, false, "sources[0]"},
		{"only expired inline", source.Resolver{Reader: reader}, []v1alpha1.Source{{Inline: testpki.ExpiredCA("old").PEM()}}, bundle.ReasonNoValidCA, false, "sources[0] (inline)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.resolver.Resolve(context.Background(), tc.sources)
			var se *source.Error
			if !errors.As(err, &se) {
				t.Fatalf("Resolve() = %v, want a *source.Error", err)
			}
			if se.Reason != tc.reason || se.Transient != tc.transient {
				t.Errorf("reason %q transient %v, want %q %v (%v)", se.Reason, se.Transient, tc.reason, tc.transient, err)
			}
			if len(se.Source) < len(tc.sourceNaming) || se.Source[:len(tc.sourceNaming)] != tc.sourceNaming {
				t.Errorf("source %q, want it to start with %q", se.Source, tc.sourceNaming)
			}
		})
	}
}

func TestResolveMergesEverySource(t *testing.T) {
	a, b, c, d := testpki.ValidCA("a"), testpki.ValidCA("b"), testpki.ValidCA("c"), testpki.ValidCA("d")
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"ca": a.PEM()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"ca": []byte(b.PEM())}},
	).Build()
	jwtKey, err := x509MarshalPKIX(c)
	if err != nil {
		t.Fatal(err)
	}
	r := source.Resolver{Reader: reader, AllowSecrets: true, Now: time.Now, Spire: &fakeSpire{
		own: &spire.Bundle{TrustDomain: "example.org", X509Authorities: [][]byte{c.Cert.Raw}, JWTAuthorities: []spire.JWTKey{{KeyID: "k", PublicKey: jwtKey}}},
		federated: map[string]*spire.Bundle{"other.org": {TrustDomain: "other.org", X509Authorities: [][]byte{d.Cert.Raw},
			JWTAuthorities: []spire.JWTKey{{KeyID: "foreign", PublicKey: jwtKey}}}},
	}}
	res, err := r.Resolve(context.Background(), []v1alpha1.Source{
		{ConfigMap: &v1alpha1.KeySelector{Namespace: "ns", Name: "cm", Key: "ca"}},
		{Secret: &v1alpha1.KeySelector{Namespace: "ns", Name: "s", Key: "ca"}},
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}},
		{Inline: a.PEM()},
	})
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if got := bundle.New(res.Certificates, nil).Len(); got != 4 {
		t.Errorf("merged %d distinct CAs, want 4", got)
	}
	if len(res.JWTAuthorities) != 1 || res.JWTAuthorities[0].KeyID != "k" {
		t.Errorf("JWT authorities = %v, want only the server's own key", res.JWTAuthorities)
	}
	if res.SpireTrustDomain != "example.org" {
		t.Errorf("SpireTrustDomain = %q", res.SpireTrustDomain)
	}
}
func x509MarshalPKIX(ca testpki.CA) ([]byte, error) {
	return x509.MarshalPKIXPublicKey(&ca.Key.PublicKey)
}
