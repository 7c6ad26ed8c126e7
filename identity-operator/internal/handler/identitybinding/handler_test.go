package identitybinding_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
	"github.com/trustplane/trustplane/identity-operator/internal/setup"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

// These tests drive the handler directly against a real kube-apiserver that
// starts WITHOUT the InferencePool CRD, so the missing-CRD path is the real
// one; they then install an InferencePool CRD whose spec is schemaless, the
// way other served versions deliver selector shapes the v1 schema would
// refuse, and run every pool-selector rule through the handler.

const env = "test"

var (
	td = spiffeid.RequireTrustDomainFromString("example.org")
	cp *testenv.ControlPlane
	ns atomic.Int32
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	testenv.DiscardControllerRuntimeLogs()
	s, err := setup.NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	external, err := testsupport.ExternalCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	crds := testsupport.OwnCRDs()
	for _, f := range external {
		if !strings.Contains(f, "inferencepools") {
			crds = append(crds, f)
		}
	}
	cp, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{CRDDirectoryPaths: crds, Scheme: s})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

// cachedClient returns a client that reads through a fresh informer cache
// with the handler's indexes, as the manager's client does.
func cachedClient(t *testing.T) client.Client {
	t.Helper()
	_, c := cacheAndClient(t)
	return c
}

// cacheAndClient returns a started, synced cache and a client reading
// through it.
func cacheAndClient(t *testing.T) (cache.Cache, client.Client) {
	t.Helper()
	return cacheAndClientAs(t, cp.Config)
}

// cacheAndClientAs is cacheAndClient with a client that writes with cfg
// (another identity, or requests observed).
func cacheAndClientAs(t *testing.T, cfg *rest.Config) (cache.Cache, client.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := cache.New(cp.Config, cache.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := index.Register(ctx, c, td); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	cl, err := client.New(cfg, client.Options{Scheme: cp.Scheme, Cache: &client.CacheOptions{Reader: c, Unstructured: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c, cl
}

func newHandler(t *testing.T, c client.Client) *identitybinding.Handler {
	t.Helper()
	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes",
		CRDMissingRetry: 45 * time.Second, WithdrawalRetry: 100 * time.Millisecond,
		APIReader: cp.Client,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("h-%d", ns.Add(1))
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// createBinding creates a binding to the InferencePool "llm" and waits until
// c's cache holds it, so the handler's index lookups see it.
func createBinding(t *testing.T, c client.Client, namespace string) *v1alpha1.IdentityBinding {
	t.Helper()
	b := newBinding(namespace, "b")
	if err := cp.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() error {
		return c.Get(context.Background(), client.ObjectKeyFromObject(b), &v1alpha1.IdentityBinding{})
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	return b
}

// newBinding returns binding name of namespace to the InferencePool "llm",
// for the service account "serving" and the variant "v1".
func newBinding(namespace, name string) *v1alpha1.IdentityBinding {
	return &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{labels.Environment: env}},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef:            v1alpha1.PoolReference{Name: "llm"},
			ServiceAccountName: "serving",
			IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: "v1"},
		},
	}
}

// createPool creates an InferencePool whose spec.selector is the given JSON
// ("" leaves it out) and waits until c's cache holds it.
func createPool(t *testing.T, c client.Client, namespace, selectorJSON string) {
	t.Helper()
	spec := map[string]any{}
	if selectorJSON != "" {
		var sel any
		if err := json.Unmarshal([]byte(selectorJSON), &sel); err != nil {
			t.Fatal(err)
		}
		spec["selector"] = sel
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(pool.InferencePoolGVK())
	u.SetNamespace(namespace)
	u.SetName("llm")
	if err := cp.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(pool.InferencePoolGVK())
		return c.Get(context.Background(), client.ObjectKeyFromObject(u), got)
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

func reconcile(t *testing.T, h *identitybinding.Handler, c client.Client, b *v1alpha1.IdentityBinding) error {
	t.Helper()
	return passIn(t, h, c, cp.Client, env, b)
}

// passIn runs one pass of b as the Controller would in environment
// environment, with live as the janitor's uncached reader.
func passIn(t *testing.T, h *identitybinding.Handler, c client.Client, live client.Reader, environment string, b *v1alpha1.IdentityBinding) error {
	t.Helper()
	j, err := janitor.New(scoped.New(c, environment), b, janitor.WithLiveReader(live))
	if err != nil {
		t.Fatal(err)
	}
	// As the Controller does: a successful pass is followed by the cleanup
	// of what it declared and did not write.
	ctx := janitor.IntoContext(context.Background(), j)
	if err := h.CreateOrUpdate(ctx, b); err != nil {
		return err
	}
	_, err = j.Cleanup(ctx)
	return err
}

func failureConditions(b *v1alpha1.IdentityBinding) map[string]string {
	out := map[string]string{}
	for _, c := range b.Status.Conditions {
		out[c.Type] = c.Reason
	}
	return out
}

// entriesOf counts the SpiffeEntries owned by b, read uncached.
func entriesOf(t *testing.T, b *v1alpha1.IdentityBinding) int {
	t.Helper()
	var l spiffev1alpha1.SpiffeEntryList
	if err := cp.Client.List(context.Background(), &l, client.MatchingLabels{labels.OwnerUID: string(b.UID)}); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// schemalessInferencePoolCRD serves inference.networking.k8s.io/v1
// InferencePool with an unvalidated spec.
func schemalessInferencePoolCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name: "inferencepools." + v1alpha1.InferencePoolGroup,
			// *.k8s.io groups need it; the upstream CRD carries it too.
			Annotations: map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api-inference-extension"},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: v1alpha1.InferencePoolGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "inferencepools", Singular: "inferencepool", Kind: "InferencePool", ListKind: "InferencePoolList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: pool.InferencePoolGVK().Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: &preserve},
					},
				}},
			}},
		},
	}
}

// TestUnsupportedPoolKindIsReported proves the handler's own guard: a kind
// that admission refuses today (an object stored before that validation)
// is InvalidRef UnsupportedPoolKind with no output, never a panic.
func TestUnsupportedPoolKindIsReported(t *testing.T) {
	c := cachedClient(t)
	b := createBinding(t, c, newNamespace(t))
	b.Spec.PoolRef = v1alpha1.PoolReference{Group: "batch", Kind: "Job", Name: "llm"}
	err := reconcile(t, newHandler(t, c), c, b)
	if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonUnsupportedPoolKind || !ctrlerrors.IsBlocked(err) {
		t.Fatalf("want blocked UnsupportedPoolKind, got %q (%v)", got, err)
	}
	if f := failureConditions(b); f[v1alpha1.ConditionInvalidRef] != v1alpha1.ReasonUnsupportedPoolKind || len(f) != 1 {
		t.Fatalf("want exactly InvalidRef=UnsupportedPoolKind, got %v", f)
	}
	if entriesOf(t, b) != 0 {
		t.Fatal("no output for an unsupported pool kind")
	}
}

// TestNegativeSVIDTTLIsReported proves the handler's own guard for a TTL
// that admission refuses today (an object stored before that validation):
// RenderFailure InvalidSVIDTTL with no output, never an output SPIRE
// rejects.
func TestNegativeSVIDTTLIsReported(t *testing.T) {
	c := cachedClient(t)
	b := createBinding(t, c, newNamespace(t))
	b.Spec.JWTSVIDTTL = &metav1.Duration{Duration: -time.Minute}
	err := reconcile(t, newHandler(t, c), c, b)
	if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonInvalidSVIDTTL || !ctrlerrors.IsBlocked(err) {
		t.Fatalf("want blocked InvalidSVIDTTL, got %q (%v)", got, err)
	}
	if f := failureConditions(b); f[v1alpha1.ConditionRenderFailure] != v1alpha1.ReasonInvalidSVIDTTL || len(f) != 1 {
		t.Fatalf("want exactly RenderFailure=InvalidSVIDTTL, got %v", f)
	}
	if entriesOf(t, b) != 0 {
		t.Fatal("no output for a negative TTL")
	}
}

// TestInferencePoolReadAsUnstructured runs in a fixed order: first with no
// InferencePool CRD (InvalidRef InferencePoolCRDMissing, slow retry, never a
// crash), then with a schemaless one, through every pool-selector rule.
func TestInferencePoolReadAsUnstructured(t *testing.T) {
	t.Run("missing CRD: InvalidRef InferencePoolCRDMissing with a slow retry", func(t *testing.T) {
		c := cachedClient(t)
		b := createBinding(t, c, newNamespace(t))
		err := reconcile(t, newHandler(t, c), c, b)
		r, ok := ctrlerrors.AsRetryable(err)
		if !ok || r.Delay != 45*time.Second {
			t.Fatalf("want the configured slow retry, got %v", err)
		}
		if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonInferencePoolCRDMissing {
			t.Fatalf("want reason InferencePoolCRDMissing, got %q (%v)", got, err)
		}
		if f := failureConditions(b); f[v1alpha1.ConditionInvalidRef] != v1alpha1.ReasonInferencePoolCRDMissing || len(f) != 1 {
			t.Fatalf("want exactly InvalidRef=InferencePoolCRDMissing, got %v", f)
		}
		if entriesOf(t, b) != 0 {
			t.Fatal("no output without a pool")
		}
	})

	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{schemalessInferencePoolCRD()},
	}); err != nil {
		t.Fatalf("install InferencePool CRD: %v", err)
	}

	cases := []struct {
		name     string
		selector string
		ok       bool
	}{
		{"matchLabels", `{"matchLabels":{"app":"llm"}}`, true},
		{"flat map normalised to matchLabels", `{"app":"llm"}`, true},
		{"missing selector", ``, false},
		{"empty selector", `{}`, false},
		{"empty matchLabels", `{"matchLabels":{}}`, false},
		{"empty key", `{"":"llm"}`, false},
		{"empty value", `{"app":""}`, false},
		{"non-string value", `{"app":3}`, false},
		{"invalid key", `{"a b":"llm"}`, false},
		{"invalid value", `{"app":"-llm"}`, false},
		{"leading whitespace", `{"app":" llm"}`, false},
		{"trailing whitespace", `{"app":"llm\t"}`, false},
		{"matchExpressions", `{"matchExpressions":[{"key":"app","operator":"Exists"}]}`, false},
		{"matchLabels with empty matchExpressions", `{"matchLabels":{"app":"llm"},"matchExpressions":[]}`, false},
		{"undecodable list", `["app"]`, false},
	}
	c := cachedClient(t)
	h := newHandler(t, c)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			namespace := newNamespace(t)
			createPool(t, c, namespace, tc.selector)
			b := createBinding(t, c, namespace)
			err := reconcile(t, h, c, b)
			if tc.ok {
				if err != nil || entriesOf(t, b) != 1 || len(b.Status.Outputs) != 1 {
					t.Fatalf("want Ready with one output, got %v, %d entries, outputs %v", err, entriesOf(t, b), b.Status.Outputs)
				}
				want := []string{"k8s:ns:" + namespace, "k8s:pod-label:app:llm", "k8s:pod-label:identity.trustplane.dev/variant:v1", "k8s:sa:serving"}
				if strings.Join(b.Status.Selectors, ",") != strings.Join(want, ",") {
					t.Fatalf("selectors %v, want %v", b.Status.Selectors, want)
				}
				return
			}
			if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonInvalidPoolSelector || !ctrlerrors.IsBlocked(err) {
				t.Fatalf("want blocked InvalidPoolSelector, got %q (%v)", got, err)
			}
			if f := failureConditions(b); f[v1alpha1.ConditionUnsafeSelector] != v1alpha1.ReasonInvalidPoolSelector || len(f) != 1 {
				t.Fatalf("want exactly UnsafeSelector=InvalidPoolSelector, got %v", f)
			}
			if entriesOf(t, b) != 0 || b.Status.Selectors != nil {
				t.Fatalf("a rejected binding must have no output and no selectors, got %d entries, %v", entriesOf(t, b), b.Status.Selectors)
			}
		})
	}
}

// TestManyPeersKeepTheStatusBounded: one namespace can create any number
// of bindings in one group; each conflicts with all the others, and its
// status must not grow with them (every peer's pass writes it again). The
// binding lists the first 20 conflicts, names 5 in its message and counts
// them all, the duplicate ID (its reason) first wherever its peer sorts,
// and is withdrawn.
func TestManyPeersKeepTheStatusBounded(t *testing.T) {
	c := cachedClient(t)
	namespace := newNamespace(t)
	// b-00 and zz render the same SPIFFE ID (DuplicateSPIFFEID); b-01 to
	// b-29 each render another one of the same group (VariantConflict).
	const peers = 31
	var first *v1alpha1.IdentityBinding
	for i := range peers {
		b := newBinding(namespace, fmt.Sprintf("b-%02d", i))
		switch {
		case i == peers-1:
			b.Name = "zz"
		case i > 0:
			b.Spec.SPIFFEIDPathTemplate = fmt.Sprintf("ns/{namespace}/sa/{serviceAccount}/p%02d", i)
		}
		if err := cp.Client.Create(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b
		}
	}
	NewWithT(t).Eventually(func() (int, error) {
		var l v1alpha1.IdentityBindingList
		err := c.List(context.Background(), &l, client.InNamespace(namespace))
		return len(l.Items), err
	}, 10*time.Second, 50*time.Millisecond).Should(Equal(peers))

	err := reconcile(t, newHandler(t, c), c, first)
	if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonDuplicateSPIFFEID {
		t.Fatalf("want DuplicateSPIFFEID, got %q (%v)", got, err)
	}
	if n := len(first.Status.Conflicts); n != 20 {
		t.Errorf("status.conflicts lists %d peers, want 20", n)
	}
	for i, c := range first.Status.Conflicts {
		want := fmt.Sprintf("%s/b-%02d", namespace, i)
		if i == 0 {
			want = namespace + "/zz"
		}
		if c.Peer != want {
			t.Errorf("conflict %d is %s, want %s (the duplicate first, then by peer)", i, c.Peer, want)
		}
	}
	var msg string
	for _, cond := range first.Status.Conditions {
		if cond.Type == v1alpha1.ConditionConflict {
			msg = cond.Message
		}
	}
	if want := "conflicts with " + namespace + "/zz (DuplicateSPIFFEID), "; !strings.HasPrefix(msg, want) {
		t.Errorf("Conflict message %q, want it to name the duplicate first: %q", msg, want)
	}
	if want := "and 25 more (30 in all; status.conflicts lists the first 20)"; !strings.Contains(msg, want) {
		t.Errorf("Conflict message %q, want it to count the rest: %q", msg, want)
	}
	if strings.Contains(msg, "b-05") {
		t.Errorf("Conflict message names more than 5 peers: %q", msg)
	}
	if entriesOf(t, first) != 0 {
		t.Error("a binding in conflict keeps no output")
	}
}
