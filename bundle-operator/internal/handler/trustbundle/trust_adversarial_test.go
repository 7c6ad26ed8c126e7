package trustbundle

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// attackSpire is a spire.Reader whose answers the test sets between passes.
type attackSpire struct {
	local     *spire.Bundle
	federated map[string]*spire.Bundle
	down      bool
}

func (s *attackSpire) ServerBundle(context.Context) (*spire.Bundle, error) {
	if s.down {
		return nil, errors.New("connection refused")
	}
	return s.local, nil
}

func (s *attackSpire) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	if s.down {
		return nil, errors.New("connection refused")
	}
	return s.federated, nil
}

func ders(cas ...testpki.CA) [][]byte {
	var out [][]byte
	for _, c := range cas {
		out = append(out, c.Cert.Raw)
	}
	return out
}

func pemOfCAs(cas ...testpki.CA) string {
	var b strings.Builder
	for _, c := range cas {
		b.WriteString(c.PEM())
	}
	return b.String()
}

// sourceConfigMap is the ConfigMap trusted/ca with data ca.crt.
func sourceConfigMap(pemText string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "trusted", Name: "ca"}, Data: map[string]string{"ca.crt": pemText}}
}

func statusHolds(st *v1alpha1.TrustBundleStatus, ca testpki.CA) bool {
	sha := bundle.NewCertificate(ca.Cert).SHA256
	for _, c := range st.Certificates {
		if c.SHA256 == sha {
			return true
		}
	}
	return false
}

// TestAdversarialACASPIRERevokedIsNotRetainedThroughAConfigMapCopy: the SPIRE
// CA X is also kept in a ConfigMap source of the allowed namespace (a
// common copy of SPIRE's CA). SPIRE revokes X (it leaves SPIRE's bundle)
// while the ConfigMap still holds it, so X stays, from the ConfigMap. One
// pass later the ConfigMap drops X too. The status now records X as a
// ConfigMap CA only, so retainRemovedFor keeps it for the grace period.
// docs/bundle-operator.md: "A CA that leaves SPIRE's bundle (its own or a
// federated one) is never retained ... keeping it would keep trusting a key
// that may be compromised." Expected: X is gone at the third pass.
func TestAdversarialACASPIRERevokedIsNotRetainedThroughAConfigMapCopy(t *testing.T) {
	h, applied := attackHandler(t)
	local, revoked, cmCA := testpki.ValidCA("spire-L"), testpki.ValidCA("spire-X"), testpki.ValidCA("cm-C")
	sp := &attackSpire{local: &spire.Bundle{TrustDomain: "example.org", X509Authorities: ders(local, revoked)}}
	reader := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(sourceConfigMap(pemOfCAs(cmCA, revoked))).Build()
	h.Sources = &source.Resolver{Reader: reader, Spire: sp, Namespaces: []string{"trusted"}}
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}},
				{ConfigMap: &v1alpha1.KeySelector{Namespace: "trusted", Name: "ca", Key: "ca.crt"}}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: time.Hour}},
		},
	}
	ctx := context.Background()
	pass := func(n int) {
		t.Helper()
		_ = h.CreateOrUpdate(ctx, tb)
		if tb.Status.Fingerprint == "" {
			t.Fatalf("pass %d published nothing", n)
		}
	}
	pass(1)
	// SPIRE revokes X; the ConfigMap still holds it.
	sp.local = &spire.Bundle{TrustDomain: "example.org", X509Authorities: ders(local)}
	pass(2)
	// The ConfigMap drops X too.
	cm := sourceConfigMap(pemOfCAs(cmCA))
	if err := reader.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	pass(3)
	if statusHolds(&tb.Status, revoked) {
		t.Errorf("the CA SPIRE revoked two passes ago is still published (retained for %s as if it were only a ConfigMap CA): status %d CAs",
			tb.Spec.Options.RetainRemovedFor.Duration, tb.Status.CACount)
	}
	if pemText, _ := applied()["team"]["ca.crt"].(string); strings.Contains(pemText, revoked.PEM()) {
		t.Errorf("target team/ca still holds the revoked SPIRE CA")
	}
}

// TestAdversarialAConfigMapCopyOfAFederatedCANeverEntersTheLocalSPIFFEDocument:
// the allowed namespace's ConfigMap holds the CA of a federated domain
// (other.org) and SPIRE lists it for other.org. The CA must appear in the
// PEM format and in other.org's document, never in the local one.
func TestAdversarialAConfigMapCopyOfAFederatedCANeverEntersTheLocalSPIFFEDocument(t *testing.T) {
	h, applied := attackHandler(t)
	local, fed := testpki.ValidCA("spire-L"), testpki.ValidCA("other-F")
	sp := &attackSpire{
		local:     &spire.Bundle{TrustDomain: "example.org", X509Authorities: ders(local)},
		federated: map[string]*spire.Bundle{"other.org": {TrustDomain: "other.org", X509Authorities: ders(fed, local)}},
	}
	reader := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(sourceConfigMap(pemOfCAs(fed))).Build()
	h.Sources = &source.Resolver{Reader: reader, Spire: sp, Namespaces: []string{"trusted"}}
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"other.org"}}},
				{ConfigMap: &v1alpha1.KeySelector{Namespace: "trusted", Name: "ca", Key: "ca.crt"}}},
			Target: v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca",
				Keys: v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe", FederatedSPIFFE: "federated."}}},
		},
	}
	if err := h.CreateOrUpdate(context.Background(), tb); err != nil {
		t.Fatalf("CreateOrUpdate: %v", err)
	}
	doc, _ := applied()["team"]["bundle.spiffe"].(string)
	var parsed struct {
		Keys []struct {
			Use string   `json:"use"`
			X5c []string `json:"x5c"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(doc), &parsed); err != nil {
		t.Fatalf("bundle.spiffe %q: %v", doc, err)
	}
	for _, k := range parsed.Keys {
		for _, c := range k.X5c {
			der := mustB64(t, c)
			if cert, err := x509.ParseCertificate(der); err == nil && cert.Equal(fed.Cert) {
				t.Fatalf("the local SPIFFE document holds other.org's CA")
			}
		}
	}
	if len(parsed.Keys) != 1 {
		t.Fatalf("the local SPIFFE document holds %d keys, want SPIRE's one local authority", len(parsed.Keys))
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
