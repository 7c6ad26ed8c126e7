package identitybinding_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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
	return handlerWith(t, c, apiReader, nil)
}

// handlerWith returns a handler reading through c, the CRD through
// apiReader, and checking that the pool's informer of informers (when not
// nil) has synced.
func handlerWith(t *testing.T, c client.Client, apiReader client.Reader, informers pool.InformerGetter) *identitybinding.Handler {
	t.Helper()
	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes",
		CRDMissingRetry: 45 * time.Second, WithdrawalRetry: 100 * time.Millisecond,
		APIReader: apiReader, Informers: informers,
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
	if why := pool.CRDNotServing(crd, pool.InferencePoolGVK().Kind, pool.InferencePoolGVK().Version); why != "" {
		t.Fatalf("the installed CRD serves %s and is established, got %q", pool.InferencePoolGVK().Version, why)
	}
	if why := pool.CRDNotServing(crd, pool.InferencePoolGVK().Kind, "v9"); !strings.Contains(why, "does not serve v9") || !strings.Contains(why, "it serves v1") {
		t.Fatalf("want the served versions named for a version it lacks, got %q", why)
	}
}

// crdClient is a client that reads, updates and deletes
// CustomResourceDefinitions.
func crdClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// deleteInferencePoolCRD deletes the InferencePool CRD and waits until it is
// gone. The API server's CRD finalizer deletes the instances first and
// confirms they are gone by polling every five seconds for up to a minute
// before it retries with backoff, so on a loaded machine the deletion can
// take more than a minute; the wait allows three, and a timeout names the
// CRD's Terminating condition, which says what the finalizer is waiting
// for.
func deleteInferencePoolCRD(t *testing.T, crds client.Client) {
	t.Helper()
	ctx := context.Background()
	if err := crds.Delete(ctx, schemalessInferencePoolCRD()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	terminating := "none"
	NewWithT(t).Eventually(func() bool {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := crds.Get(ctx, client.ObjectKey{Name: pool.InferencePoolCRDName}, crd)
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Terminating {
				terminating = fmt.Sprintf("%s: %s", c.Reason, c.Message)
			}
		}
		return apierrors.IsNotFound(err)
	}, 3*time.Minute, 200*time.Millisecond).Should(BeTrue(),
		func() string {
			return "the InferencePool CRD is not deleted; its Terminating condition: " + terminating
		})
}

// A CRD that no longer defines v1 InferencePools (created again under the
// same name with another kind, or no longer serving v1) will never be
// mapped: the NoMatch a restarted operator gets is permanent, not a stale
// discovery answer. The binding is told the CRD is missing and withdraws
// its outputs, instead of retrying for ever with them kept.
func TestACRDThatNoLongerDefinesV1InferencePoolsIsReportedMissing(t *testing.T) {
	for _, tc := range []struct {
		name, says string
		change     func(t *testing.T, crds client.Client)
	}{
		{"created again with another kind", "defines the kind InferencePoolX, not InferencePool", func(t *testing.T, crds client.Client) {
			deleteInferencePoolCRD(t, crds)
			other := schemalessInferencePoolCRD()
			other.Spec.Names.Kind, other.Spec.Names.ListKind = "InferencePoolX", "InferencePoolXList"
			if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{other}}); err != nil {
				t.Fatal(err)
			}
		}},
		{"v1 no longer served", "does not serve v1, which the operator reads (it serves v1alpha2)", func(t *testing.T, crds client.Client) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := crds.Get(context.Background(), client.ObjectKey{Name: pool.InferencePoolCRDName}, crd); err != nil {
				t.Fatal(err)
			}
			v1 := crd.Spec.Versions[0]
			v1.Served = false
			older := *v1.DeepCopy()
			older.Name, older.Served, older.Storage = "v1alpha2", true, false
			crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{v1, older}
			if err := crds.Update(context.Background(), crd); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cachedClient(t)
			b := readyBindingToAPool(t, c)
			crds := crdClient(t)
			t.Cleanup(func() { deleteInferencePoolCRD(t, crds); installInferencePoolCRD(t) })
			tc.change(t, crds)

			// Wait until discovery no longer maps v1 InferencePools: a
			// mapper that still did would start an informer for them, whose
			// first list never succeeds, and the cached read would wait
			// for its sync for ever.
			NewWithT(t).Eventually(func() bool {
				direct, err := client.New(cp.Config, client.Options{Scheme: cp.Scheme})
				if err != nil {
					t.Fatal(err)
				}
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(pool.InferencePoolGVK())
				return meta.IsNoMatchError(direct.Get(context.Background(), client.ObjectKey{Namespace: b.Namespace, Name: "llm"}, u))
			}, 30*time.Second, 200*time.Millisecond).Should(BeTrue(), "discovery still maps v1 InferencePools")

			// A restarted operator: a client whose REST mapper learns from
			// discovery now.
			fresh := cachedClient(t)
			var err error
			NewWithT(t).Eventually(func() string {
				err = reconcile(t, newHandler(t, fresh), fresh, b)
				return ctrlerrors.Reason(err, "")
			}, 30*time.Second, 200*time.Millisecond).Should(Equal(v1alpha1.ReasonInferencePoolCRDMissing),
				func() string { return fmt.Sprintf("last error: %v", err) })
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("want the error to say %q, got %v", tc.says, err)
			}
			if n := entriesOf(t, b); n != 0 {
				t.Fatalf("no CRD serves v1 InferencePools, yet the binding keeps %d output(s)", n)
			}
		})
	}
}
