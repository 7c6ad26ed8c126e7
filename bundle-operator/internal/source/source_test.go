package source_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
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
	t.Run("each trust domain is validated on its own", func(t *testing.T) { testResolveValidatesEachTrustDomain(t, e) })
	t.Run("spec.trustDomain must be SPIRE's", func(t *testing.T) { testResolveComparesTheTrustDomain(t, e) })
	t.Run("dropNonCA drops leaves", func(t *testing.T) { testResolveDropsNonCAs(t, e) })
}

// setFederated makes SPIRE hold pemText as the bundle of trust domain td.
func setFederated(t *testing.T, ctx context.Context, e *testbed.Bed, td, pemText string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), td+".pem")
	if err := os.WriteFile(path, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Spire.CLI(ctx, "bundle", "set", "-id", "spiffe://"+td, "-path", path); err != nil {
		t.Fatalf("set federated bundle: %v\n%s", err, out)
	}
}

// testResolveValidatesEachTrustDomain proves that a federated trust domain
// whose CAs are all expired is refused although SPIRE's own bundle holds a
// valid CA: validated as a union, the expired domain would be published.
func testResolveValidatesEachTrustDomain(t *testing.T, e *testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setFederated(t, ctx, e, "expired.test", testpki.ExpiredCA("expired.test").PEM())
	r := source.Resolver{Reader: e.ControlPlane.Client, Spire: e.SpireClient}
	_, err := r.Resolve(ctx, &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"expired.test"}}},
	}})
	var se *source.Error
	if !errors.As(err, &se) || se.Reason != bundle.ReasonNoValidCA || !strings.Contains(err.Error(), "expired.test") {
		t.Fatalf("Resolve() = %v, want %s naming expired.test", err, bundle.ReasonNoValidCA)
	}
}

// testResolveComparesTheTrustDomain proves that a spec.trustDomain other
// than the SPIRE server's is refused with TrustDomainMismatch.
func testResolveComparesTheTrustDomain(t *testing.T, e *testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := source.Resolver{Reader: e.ControlPlane.Client, Spire: e.SpireClient}
	spireSource := []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}
	_, err := r.Resolve(ctx, &v1alpha1.TrustBundleSpec{Sources: spireSource, TrustDomain: "other.example"})
	var se *source.Error
	if !errors.As(err, &se) || se.Reason != source.ReasonTrustDomainMismatch {
		t.Fatalf("Resolve() = %v, want %s", err, source.ReasonTrustDomainMismatch)
	}
	if _, err := r.Resolve(ctx, &v1alpha1.TrustBundleSpec{Sources: spireSource, TrustDomain: testbed.TrustDomain}); err != nil {
		t.Fatalf("Resolve() with SPIRE's own trust domain = %v", err)
	}
}

// testResolveDropsNonCAs proves options.dropNonCA: a leaf is dropped instead
// of refusing the source, and the source must still hold a valid CA.
func testResolveDropsNonCAs(t *testing.T, e *testbed.Bed) {
	ctx := context.Background()
	ca := testpki.ValidCA("ca")
	leaf := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Leaf("spiffe://example.org/w").Raw}))
	r := source.Resolver{Reader: e.ControlPlane.Client}
	spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{Inline: leaf + ca.PEM()}}}
	spec.Options.DropNonCA = true
	res, err := r.Resolve(ctx, spec)
	if err != nil || len(res.Certificates) != 1 || !res.Certificates[0].Equal(ca.Cert) {
		t.Fatalf("Resolve() = %v, %v; want the CA alone", res, err)
	}
	spec.Sources[0].Inline = leaf
	var se *source.Error
	if _, err := r.Resolve(ctx, spec); !errors.As(err, &se) || se.Reason != bundle.ReasonEmpty {
		t.Fatalf("a source of only a leaf = %v, want %s", err, bundle.ReasonEmpty)
	}
}

// fakeSpire serves a fixed server bundle: SPIRE cannot be made, on demand,
// to serve two keys under one key ID or an expired JWT authority.
type fakeSpire struct{ own *spire.Bundle }

func (f fakeSpire) ServerBundle(context.Context) (*spire.Bundle, error) { return f.own, nil }
func (f fakeSpire) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	return map[string]*spire.Bundle{}, nil
}

// TestResolveJWTAuthorities proves that a different key under a key ID
// already taken is refused with JWTKeyIDConflict (not silently dropped),
// that the same key read twice is not a conflict, and that SPIRE's expiry
// of a JWT authority is kept for dropExpired.
func TestResolveJWTAuthorities(t *testing.T) {
	ca := testpki.ValidCA("ca")
	k1, k2 := pkix(t, testpki.ValidCA("k1")), pkix(t, testpki.ValidCA("k2"))
	expires := time.Now().Add(-time.Minute).Truncate(time.Second)
	own := func(keys ...spire.JWTKey) *spire.Bundle {
		return &spire.Bundle{TrustDomain: "example.org", X509Authorities: [][]byte{ca.Cert.Raw}, JWTAuthorities: keys}
	}
	spec := &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}}

	r := source.Resolver{Spire: fakeSpire{own(spire.JWTKey{KeyID: "a", PublicKey: k1}, spire.JWTKey{KeyID: "a", PublicKey: k2})}}
	var se *source.Error
	if _, err := r.Resolve(context.Background(), spec); !errors.As(err, &se) || se.Reason != bundle.ReasonKeyIDConflict || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("Resolve() = %v, want %s naming the key ID", err, bundle.ReasonKeyIDConflict)
	}

	r.Spire = fakeSpire{own(spire.JWTKey{KeyID: "a", PublicKey: k1}, spire.JWTKey{KeyID: "a", PublicKey: k1},
		spire.JWTKey{KeyID: "old", PublicKey: k2, ExpiresAt: expires.Unix()})}
	res, err := r.Resolve(context.Background(), spec)
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	keys := res.Local.Bundle.JWTAuthorities()
	if len(keys) != 2 || keys[1].KeyID != "old" || !keys[1].ExpiresAt.Equal(expires) {
		t.Fatalf("JWT authorities %+v, want a once and old with its expiry", keys)
	}
	if kept := res.Local.Bundle.DropExpired(time.Now()).JWTAuthorities(); len(kept) != 1 || kept[0].KeyID != "a" {
		t.Errorf("dropExpired kept %+v, want a alone", kept)
	}
}

func pkix(t *testing.T, ca testpki.CA) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&ca.Key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// testResolveNamesTheFailingSourceAndReason proves that every source is
// validated on its own and that a failure names the source and a reason.
func testResolveNamesTheFailingSourceAndReason(t *testing.T, e *testbed.Bed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := testpki.ValidCA("good")
	leafPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: good.Leaf("spiffe://example.org/w").Raw}))
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
	allowed := []string{ns}
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
		{"ConfigMap missing", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: ns, Name: "nope", Key: "ca"}}}, source.ReasonNotFound, false, fmt.Sprintf("sources[0] (configMap %s/nope key ca)", ns)},
		{"key missing", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{cm("ca"), cm("nope")}, source.ReasonNotFound, false, "sources[1]"},
		{"private key in a ConfigMap", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{cm("key")}, bundle.ReasonPrivateKey, false, "sources[0]"},
		{"Secrets not allowed", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{{Secret: &v1alpha1.KeySelector{Namespace: ns, Name: "s", Key: "ca"}}}, source.ReasonSecretsDisabled, false, fmt.Sprintf("sources[0] (secret %s/s key ca)", ns)},
		{"SPIRE not configured", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}, source.ReasonSpireNotConfigured, false, "sources[0] (spire)"},
		{"SPIRE down", source.Resolver{Reader: reader, Namespaces: allowed, Spire: down}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}, source.ReasonSpireUnavailable, true, "sources[0]"},
		{"federated bundle missing", source.Resolver{Reader: reader, Namespaces: allowed, Spire: e.SpireClient}, []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"missing.org"}}}}, source.ReasonFederatedBundleNotFound, false, "sources[0]"},
		{"only expired inline", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{{Inline: testpki.ExpiredCA("old").PEM()}}, bundle.ReasonNoValidCA, false, "sources[0] (inline)"},
		{"ConfigMap in a namespace not allowed", source.Resolver{Reader: reader, Namespaces: []string{"trustplane-system"}}, []v1alpha1.Source{cm("ca")}, source.ReasonNamespaceNotAllowed, false, "sources[0] (configMap"},
		{"Secret in a namespace not allowed", source.Resolver{Reader: reader, AllowSecrets: true}, []v1alpha1.Source{{Secret: &v1alpha1.KeySelector{Namespace: ns, Name: "s", Key: "ca"}}}, source.ReasonNamespaceNotAllowed, false, "sources[0] (secret"},
		{"a leaf next to a CA", source.Resolver{Reader: reader, Namespaces: allowed}, []v1alpha1.Source{{Inline: good.PEM() + leafPEM}}, bundle.ReasonNotCA, false, "sources[0] (inline)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.resolver.Resolve(ctx, &v1alpha1.TrustBundleSpec{Sources: tc.sources})
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

	r := source.Resolver{Reader: e.ControlPlane.Client, AllowSecrets: true, Now: time.Now, Spire: e.SpireClient, Namespaces: []string{ns}}
	res, err := r.Resolve(ctx, &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{
		{ConfigMap: &v1alpha1.KeySelector{Namespace: ns, Name: "cm", Key: "ca"}},
		{Secret: &v1alpha1.KeySelector{Namespace: ns, Name: "s", Key: "ca"}},
		{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}},
		{Inline: a.PEM()},
	}})
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if got, want := bundle.New(res.Certificates, nil).Len(), 3+len(own.X509Authorities); got != want {
		t.Errorf("merged %d distinct CAs, want %d (a, b, the federated CA and SPIRE's own)", got, want)
	}
	// Each trust domain read from SPIRE stays apart, with only its own
	// authorities.
	if res.Local == nil || res.Local.TrustDomain != "example.org" || res.Local.Bundle.Len() != len(own.X509Authorities) {
		t.Fatalf("Local = %v, want example.org with SPIRE's %d X.509 authorities only", res.Local, len(own.X509Authorities))
	}
	if n := len(res.Local.Bundle.JWTAuthorities()); n != len(own.JWTAuthorities) || n == 0 {
		t.Errorf("%d JWT authorities of example.org, want SPIRE's own %d", n, len(own.JWTAuthorities))
	}
	for _, k := range res.Local.Bundle.JWTAuthorities() {
		if k.KeyID == "foreign" {
			t.Error("the federated trust domain's JWT authority was merged into the local one")
		}
	}
	if len(res.Federated) != 1 || res.Federated[0].TrustDomain != "other.org" || res.Federated[0].Bundle.Len() != 1 ||
		!res.Federated[0].Bundle.X509()[0].Equal(fed.Cert) || len(res.Federated[0].Bundle.JWTAuthorities()) != 1 {
		t.Errorf("Federated = %v, want other.org with its CA and JWT authority alone", res.Federated)
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
