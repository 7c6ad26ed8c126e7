package identitybinding_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// These tests run after handler_test.go's, which need the InferencePool CRD
// absent at first (test files run in name order); installing it again here
// is an update, so each test also runs alone.

// staleDiscovery answers every read of an InferencePool with the NoMatch
// error controller-runtime's REST mapper returns when discovery does not
// list the kind: what an API server replica whose discovery is behind the
// CRDs answers. No single real API server gives that answer on demand, so
// it is injected; every other read goes to the real one.
type staleDiscovery struct{ client.Client }

func (s staleDiscovery) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if gk := obj.GetObjectKind().GroupVersionKind().GroupKind(); gk == pool.InferencePoolGVK().GroupKind() {
		return &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: []string{pool.InferencePoolGVK().Version}}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func installInferencePoolCRD(t *testing.T) {
	t.Helper()
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{schemalessInferencePoolCRD()},
	}); err != nil {
		t.Fatalf("install InferencePool CRD: %v", err)
	}
}

// readyBindingToAPool returns a binding to an InferencePool, reconciled
// once with a handler that reads the pool, so it has its one output.
func readyBindingToAPool(t *testing.T, c client.Client) *v1alpha1.IdentityBinding {
	t.Helper()
	installInferencePoolCRD(t)
	namespace := newNamespace(t)
	createPool(t, c, namespace, `{"matchLabels":{"app":"llm"}}`)
	b := createBinding(t, c, namespace)
	if err := reconcile(t, newHandler(t, c), c, b); err != nil || entriesOf(t, b) != 1 {
		t.Fatalf("want the binding Ready with one output first, got %v and %d entries", err, entriesOf(t, b))
	}
	return b
}

func handlerReadingThrough(t *testing.T, c client.Client, apiReader client.Reader) *identitybinding.Handler {
	t.Helper()
	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes",
		CRDMissingRetry: 45 * time.Second, WithdrawalRetry: 100 * time.Millisecond,
		APIReader: apiReader,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantOutputsKeptAndRetried checks that err is a transient error (retried
// with backoff, not blocked, not the slow CRD-missing retry), that the
// binding reports no InvalidRef, and that its output is still there.
func wantOutputsKeptAndRetried(t *testing.T, b *v1alpha1.IdentityBinding, err error, says string) {
	t.Helper()
	if err == nil || ctrlerrors.IsBlocked(err) {
		t.Fatalf("want a transient error, got %v", err)
	}
	if _, slow := ctrlerrors.AsRetryable(err); slow || ctrlerrors.Reason(err, "") == v1alpha1.ReasonInferencePoolCRDMissing {
		t.Fatalf("a served CRD must not be reported missing, got reason %q (%v)", ctrlerrors.Reason(err, ""), err)
	}
	if !strings.Contains(err.Error(), says) {
		t.Fatalf("the error should say %q, got %v", says, err)
	}
	if f := failureConditions(b); f[v1alpha1.ConditionInvalidRef] != "" {
		t.Fatalf("want no InvalidRef condition, got %v", f)
	}
	if n := entriesOf(t, b); n != 1 {
		t.Fatalf("the binding's output was withdrawn (%d entries left) on a NoMatch for a CRD the API server serves", n)
	}
}

// An attacker is not needed: a rolling API server upgrade, or one replica
// whose discovery lags a CRD update, answers NoMatch for a served kind. Read
// as "CRD missing", that withdrew every output of every binding to an
// InferencePool, and so the workloads' identities, until the slow retry.
func TestANoMatchForAServedInferencePoolKeepsTheBindingsOutputs(t *testing.T) {
	c := cachedClient(t)
	b := readyBindingToAPool(t, c)
	stale := staleDiscovery{Client: c}
	err := reconcile(t, handlerReadingThrough(t, stale, cp.Client), stale, b)
	wantOutputsKeptAndRetried(t, b, err, "discovery not yet up to date")

	// Once discovery answers again, the binding is Ready with the same output.
	if err := reconcile(t, newHandler(t, c), c, b); err != nil || entriesOf(t, b) != 1 || len(b.Status.Outputs) != 1 {
		t.Fatalf("want Ready with one output again, got %v, %d entries, outputs %v", err, entriesOf(t, b), b.Status.Outputs)
	}
}

// A NoMatch that cannot be confirmed (the operator may not read the CRD, as
// with RBAC from an older release) proves nothing: the outputs stay, and the
// error says why.
func TestANoMatchThatCannotBeConfirmedKeepsTheBindingsOutputs(t *testing.T) {
	c := cachedClient(t)
	b := readyBindingToAPool(t, c)
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-rights"}
	noRights, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	stale := staleDiscovery{Client: c}
	err = reconcile(t, handlerReadingThrough(t, stale, noRights), stale, b)
	wantOutputsKeptAndRetried(t, b, err, "could not be read to confirm it is missing")
	if !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the error should carry the API server's refusal, got %v", err)
	}
}

// CRDNotServing must read the CRD as the API server returns it: the
// installed CRD serves v1.
func TestTheInstalledCRDIsReadAsServingV1(t *testing.T) {
	installInferencePoolCRD(t)
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: pool.InferencePoolCRDName}, crd); err != nil {
		t.Fatal(err)
	}
	if why := pool.CRDNotServing(crd, pool.InferencePoolGVK().Version); why != "" {
		t.Fatalf("the installed CRD serves %s and is established, got %q", pool.InferencePoolGVK().Version, why)
	}
	if why := pool.CRDNotServing(crd, "v9"); !strings.Contains(why, "does not serve v9") || !strings.Contains(why, "it serves v1") {
		t.Fatalf("want the served versions named for a version it lacks, got %q", why)
	}
}
