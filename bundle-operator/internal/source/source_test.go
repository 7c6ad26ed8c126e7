package source_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testbed"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/spireconn"
)

// createAll stores objs in the API server.
func createAll(t *testing.T, ctx context.Context, e *testbed.Bed, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := e.ControlPlane.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResolve runs both rules of the package against one control plane and
// one spire-server, which take seconds to start.
func TestResolve(t *testing.T) {
	e := testbed.Start(t)
	t.Run("a failure names the source and the reason", func(t *testing.T) { testResolveNamesTheFailingSourceAndReason(t, e) })
	t.Run("every source is merged", func(t *testing.T) { testResolveMergesEverySource(t, e) })
}

// testResolveNamesTheFailingSourceAndReason proves that every source is
// validated on its own and that a failure names the source and a reason.
func testResolveNamesTheFailingSourceAndReason(t *testing.T, e *testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := testpki.ValidCA("good")
	ns := newNamespace(t, ctx, e)
	createAll(t, ctx, e,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"ca": good.PEM(), "key": good.KeyPEM()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Data: map[string][]byte{"ca": []byte(good.PEM())}},
	)
	// A client of a SPIRE socket nobody listens on: the call fails as it
	// would with the server down.
	down, err := spire.Dial(ctx, spireconn.Options{SocketPath: filepath.Join(t.TempDir(), "nobody.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()

	reader := e.ControlPlane.Client
	cm := func(key string) v1alpha1.Source {
		return v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: ns, Name: "cm", Key: key}}
	}
	cases := []struct {
		name         string
		resolver     source.Resolver
		sources      []v1alpha1.Source
		reason       string
		transient    bool
		sourceNaming string
	}{
		{"ConfigMap missing", source.Resolver{Reader: reader}, []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: ns, Name: "nope", Key: "ca"}}}, source.ReasonNotFound, false, fmt.Sprintf("sources[0] (configMap %s/nope key ca)", ns)},
		{"key missing", source.Resolver{Reader: reader}, []v1alpha1.Source{cm("ca"), cm("nope")}, source.ReasonNotFound, false, "sources[1]"},
		{"private key in a ConfigMap", source.Resolver{Reader: reader}, []v1alpha1.Source{cm("key")}, bundle.ReasonPrivateKey, false, "sources[0]"},
		{"Secrets not allowed", source.Resolver{Reader: reader}, []v1alpha1.Source{{Secret: &v1alpha1.KeySelector{Namespace: ns, Name: "s", Key: "ca"}}}, source.ReasonSecretsDisabled, false, fmt.Sprintf("sources[0] (secret %s/s key ca)", ns)},
		{"SPIRE not configured", source.Resolver{Reader: reader}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}, source.ReasonSpireNotConfigured, false, "sources[0] (spire)"},
		{"SPIRE down", source.Resolver{Reader: reader, Spire: down}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}, source.ReasonSpireUnavailable, true, "sources[0]"},
		{"federated bundle missing", source.Resolver{Reader: reader, Spire: e.SpireClient}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"missing.org"}}}}, source.ReasonFederatedBundleNotFound, false, "sources[0]"},
		{"only expired inline", source.Resolver{Reader: reader}, []v1alpha1.Source{{Inline: testpki.ExpiredCA("old").PEM()}}, bundle.ReasonNoValidCA, false, "sources[0] (inline)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.resolver.Resolve(ctx, tc.sources)
			var se *source.Error
			if !errors.As(err, &se) {
				t.Fatalf("Resolve() = %v, want a *source.Error", err)
			}
			if se.Reason != tc.reason || se.Transient != tc.transient {
				t.Errorf("reason %q transient %v, want %q %v (%v)", se.Reason, se.Transient, tc.reason, tc.transient, err)
			}
			if !strings.HasPrefix(se.Source, tc.sourceNaming) {
				t.Errorf("source %q, want it to start with %q", se.Source, tc.sourceNaming)
			}
		})
	}
}

// testResolveMergesEverySource proves that all four kinds of source are
// read and merged, and that only the server's own JWT authorities are kept:
// a JWKS mixing trust domains would let one domain's key verify another's
// tokens.
func testResolveMergesEverySource(t *testing.T, e *testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b, fed := testpki.ValidCA("a"), testpki.ValidCA("b"), testpki.ValidCA("federated")
	ns := newNamespace(t, ctx, e)
	createAll(t, ctx, e,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"ca": a.PEM()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Data: map[string][]byte{"ca": []byte(b.PEM())}},
	)
	// A federated bundle with an X.509 and a JWT authority, set in SPIRE.
	doc, err := bundle.New([]*x509.Certificate{fed.Cert}, []bundle.JWTAuthority{{KeyID: "foreign", PublicKey: &fed.Key.PublicKey}}).SPIFFE("other.org")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other.org.json")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Spire.CLI(ctx, "bundle", "set", "-format", "spiffe", "-id", "spiffe://other.org", "-path", path); err != nil {
		t.Fatalf("set federated bundle: %v\n%s", err, out)
	}
	own, err := e.SpireClient.ServerBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}

	r := source.Resolver{Reader: e.ControlPlane.Client, AllowSecrets: true, Now: time.Now, Spire: e.SpireClient}
	res, err := r.Resolve(ctx, []v1alpha1.Source{
		{ConfigMap: &v1alpha1.KeySelector{Namespace: ns, Name: "cm", Key: "ca"}},
		{Secret: &v1alpha1.KeySelector{Namespace: ns, Name: "s", Key: "ca"}},
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}},
		{Inline: a.PEM()},
	})
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if got, want := bundle.New(res.Certificates, nil).Len(), 3+len(own.X509Authorities); got != want {
		t.Errorf("merged %d distinct CAs, want %d (a, b, the federated CA and SPIRE's own)", got, want)
	}
	if len(res.JWTAuthorities) != len(own.JWTAuthorities) || len(own.JWTAuthorities) == 0 {
		t.Errorf("%d JWT authorities, want SPIRE's own %d", len(res.JWTAuthorities), len(own.JWTAuthorities))
	}
	for _, k := range res.JWTAuthorities {
		if k.KeyID == "foreign" {
			t.Error("the federated trust domain's JWT authority was merged")
		}
	}
	if res.SpireTrustDomain != "example.org" {
		t.Errorf("SpireTrustDomain = %q", res.SpireTrustDomain)
	}
}

// newNamespace creates a namespace with a generated name.
func newNamespace(t *testing.T, ctx context.Context, e *testbed.Bed) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "source-"}}
	if err := e.ControlPlane.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
