package trustbundle

import (
	"context"
	"crypto/x509"
	bundlepkg "github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// attackHandler is a Handler over fake clients whose applies are recorded
// (namespace -> data) instead of stored. The namespace "team" exists.
func attackHandler(t *testing.T) (*Handler, func() map[string]map[string]any) {
	t.Helper()
	var (
		mu      sync.Mutex
		applied = map[string]map[string]any{}
	)
	writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				return err
			}
			u := &unstructured.Unstructured{Object: raw}
			data, _, _ := unstructured.NestedMap(u.Object, "data")
			mu.Lock()
			defer mu.Unlock()
			applied[u.GetNamespace()] = data
			return nil
		},
	}).Build()
	cache := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	namespaces := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}).Build()
	noInjection := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return nil },
	}).Build()
	h := &Handler{
		Sources:    &source.Resolver{Reader: cache, Namespaces: []string{"trusted"}},
		Objects:    &target.Objects{Cache: cache, Client: writer, Live: cache},
		Injector:   &target.Injector{Cache: noInjection, Live: noInjection, Client: writer},
		Namespaces: namespaces,
	}
	return h, func() map[string]map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return applied
	}
}

// TestAdversarialATrustBundleWithoutSourcesNeverPublishesAnEmptyBundle: a
// TrustBundle whose spec.sources is empty (MinItems=1 is only an admission
// rule: a TrustBundle stored under an older or hand-edited CRD, or written
// by a client of a server that does not validate, reaches the operator all
// the same). Completeness: a target holds a complete, validated bundle,
// never an empty one, and bad input gets a clear condition, not a silent
// success. Expected: CreateOrUpdate fails (no source) and writes nothing.
func TestAdversarialATrustBundleWithoutSourcesNeverPublishesAnEmptyBundle(t *testing.T) {
	h, applied := attackHandler(t)
	ca := testpki.ValidCA("published-before")
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: nil,
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
		},
	}
	// What the targets held after the last good pass.
	tb.Status.Fingerprint = "sha256:previous"
	tb.Status.Certificates = []v1alpha1.PublishedCertificate{{SHA256: "x", PEM: ca.PEM()}}
	err := h.CreateOrUpdate(context.Background(), tb)
	for ns, data := range applied() {
		if pem, _ := data["ca.crt"].(string); pem == "" {
			t.Errorf("target %s/ca written with an empty ca.crt (%q); CreateOrUpdate returned %v, status fingerprint %s, caCount %d",
				ns, pem, err, tb.Status.Fingerprint, tb.Status.CACount)
		}
	}
	if err == nil {
		t.Errorf("CreateOrUpdate() = nil for a TrustBundle without sources: a silent success publishing %d CAs", tb.Status.CACount)
	}
}

// TestAdversarialAJWKSTargetWithoutASpireSourceIsNotWrittenEmpty: keys.jwks is
// allowed at admission without a spire source (only spiffe and
// federatedSpiffe need one). Such a target's JWKS key is then written as a
// key set with no key, which a JWT verifier reads as "trust nothing" and
// which reports in sync. Completeness says a target never holds an empty
// bundle. (docs/bundle-operator.md documents "empty without a spire
// source", which contradicts the guarantee.)
func TestAdversarialAJWKSTargetWithoutASpireSourceIsNotWrittenEmpty(t *testing.T) {
	ca := testpki.ValidCA("cm")
	c := &content{all: bundleOf(ca)}
	data, err := newFormats(c).data(v1alpha1.Keys{PEM: "ca.crt", JWKS: "jwks.json"})
	if err == nil && string(data["jwks.json"]) == `{"keys":[]}` {
		t.Fatalf("data() wrote jwks.json = %s with no error: an empty JWKS in a target", data["jwks.json"])
	}
}

func bundleOf(cas ...testpki.CA) *bundlepkg.Bundle {
	var certs []*x509.Certificate
	for _, c := range cas {
		certs = append(certs, c.Cert)
	}
	return bundlepkg.New(certs, nil)
}
