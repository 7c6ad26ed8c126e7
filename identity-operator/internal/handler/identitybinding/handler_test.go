package identitybinding_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
	"github.com/trustplane/trustplane/identity-operator/internal/setup"
)

const env = "test"

var td = spiffeid.RequireTrustDomainFromString("example.org")

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := setup.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	// The fake client handles InferencePools as unstructured objects.
	s.AddKnownTypeWithName(pool.InferencePoolGVK, &unstructured.Unstructured{})
	s.AddKnownTypeWithName(pool.InferencePoolGVK.GroupVersion().WithKind("InferencePoolList"), &unstructured.UnstructuredList{})
	s.AddKnownTypeWithName(output.ClusterSPIFFEIDGVK, &unstructured.Unstructured{})
	s.AddKnownTypeWithName(output.ClusterSPIFFEIDGVK.GroupVersion().WithKind("ClusterSPIFFEIDList"), &unstructured.UnstructuredList{})
	return s
}

func newClient(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).WithStatusSubresource(&v1alpha1.IdentityBinding{})
	for field, fn := range index.Funcs(td) {
		b = b.WithIndex(&v1alpha1.IdentityBinding{}, field, fn)
	}
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

func newHandler(t *testing.T, c client.Client) *identitybinding.Handler {
	t.Helper()
	h, err := identitybinding.New(c, c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes", DefaultEnvironment: env,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func binding(ns, name, sa, variant, poolName string) *v1alpha1.IdentityBinding {
	return &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name), Labels: map[string]string{labels.Environment: env}},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef:            v1alpha1.PoolReference{Name: poolName},
			ServiceAccountName: sa,
			IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: variant},
		},
	}
}

func inferencePoolWithSelector(t *testing.T, ns, name, selectorJSON string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	if selectorJSON != "" {
		var sel any
		if err := json.Unmarshal([]byte(selectorJSON), &sel); err != nil {
			t.Fatal(err)
		}
		u.Object["spec"].(map[string]any)["selector"] = sel
	}
	u.SetGroupVersionKind(pool.InferencePoolGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func reconcile(t *testing.T, h *identitybinding.Handler, c client.Client, b *v1alpha1.IdentityBinding) error {
	t.Helper()
	j, err := janitor.New(scoped.New(c, env), b)
	if err != nil {
		t.Fatal(err)
	}
	return h.CreateOrUpdate(janitor.IntoContext(context.Background(), j), b)
}

func failureConditions(b *v1alpha1.IdentityBinding) map[string]string {
	out := map[string]string{}
	for _, c := range b.Status.Conditions {
		out[c.Type] = c.Reason
	}
	return out
}

func entryCount(t *testing.T, c client.Client) int {
	t.Helper()
	var l spiffev1alpha1.SpiffeEntryList
	if err := c.List(context.Background(), &l); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// TestPoolSelectorRulesThroughHandler runs every pool-selector rule through
// the handler with an InferencePool read as unstructured, as served schemas
// vary: accepted shapes reach Ready with an output, rejected ones set
// UnsafeSelector/InvalidPoolSelector and write nothing.
func TestPoolSelectorRulesThroughHandler(t *testing.T) {
	cases := []struct {
		name     string
		selector string
		ok       bool
	}{
		{"matchLabels", `{"matchLabels":{"app":"llm"}}`, true},
		{"flat map", `{"app":"llm"}`, true},
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
		{"matchLabels with matchExpressions", `{"matchLabels":{"app":"llm"},"matchExpressions":[]}`, false},
		{"undecodable list", `["app"]`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := binding("ns", "b", "serving", "v1", "llm")
			c := newClient(t, nil, b, inferencePoolWithSelector(t, "ns", "llm", tc.selector))
			err := reconcile(t, newHandler(t, c), c, b)
			if tc.ok {
				if err != nil || entryCount(t, c) != 1 || len(b.Status.Outputs) != 1 {
					t.Fatalf("want Ready with one output, got %v, %d entries, outputs %v", err, entryCount(t, c), b.Status.Outputs)
				}
				return
			}
			if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonInvalidPoolSelector || !ctrlerrors.IsBlocked(err) {
				t.Fatalf("want blocked InvalidPoolSelector, got %q (%v)", got, err)
			}
			if f := failureConditions(b); f[v1alpha1.ConditionUnsafeSelector] != v1alpha1.ReasonInvalidPoolSelector || len(f) != 1 {
				t.Fatalf("want exactly UnsafeSelector=InvalidPoolSelector, got %v", f)
			}
			if entryCount(t, c) != 0 || b.Status.Selectors != nil {
				t.Fatalf("a rejected binding must have no output and no selectors, got %d entries, %v", entryCount(t, c), b.Status.Selectors)
			}
		})
	}
}

// TestInferencePoolCRDMissing proves a missing CRD is InvalidRef
// InferencePoolCRDMissing with a slow retry, not a crash or a fast loop.
func TestInferencePoolCRDMissing(t *testing.T) {
	b := binding("ns", "b", "serving", "v1", "llm")
	c := newClient(t, &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == pool.InferencePoolGVK {
			return &meta.NoKindMatchError{GroupKind: pool.InferencePoolGVK.GroupKind(), SearchedVersions: []string{"v1"}}
		}
		return c.Get(ctx, key, obj, opts...)
	}}, b)
	err := reconcile(t, newHandler(t, c), c, b)
	r, ok := ctrlerrors.AsRetryable(err)
	if !ok || r.Delay < 30*time.Second {
		t.Fatalf("want a slow retry, got %v", err)
	}
	if got := ctrlerrors.Reason(err, ""); got != v1alpha1.ReasonInferencePoolCRDMissing {
		t.Fatalf("want reason InferencePoolCRDMissing, got %q", got)
	}
	if f := failureConditions(b); f[v1alpha1.ConditionInvalidRef] != v1alpha1.ReasonInferencePoolCRDMissing || len(f) != 1 {
		t.Fatalf("want exactly InvalidRef=InferencePoolCRDMissing, got %v", f)
	}
}

// TestDeploymentAndStatefulSetPools proves both apps kinds are pools.
func TestDeploymentAndStatefulSetPools(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	for _, kind := range []string{v1alpha1.DeploymentKind, v1alpha1.StatefulSetKind} {
		t.Run(kind, func(t *testing.T) {
			b := binding("ns", "b", "serving", "v1", "web")
			b.Spec.PoolRef.Kind = kind
			var p client.Object = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: appsv1.DeploymentSpec{Selector: sel}}
			if kind == v1alpha1.StatefulSetKind {
				p = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: appsv1.StatefulSetSpec{Selector: sel}}
			}
			c := newClient(t, nil, b, p)
			if err := reconcile(t, newHandler(t, c), c, b); err != nil {
				t.Fatal(err)
			}
			if len(b.Status.Selectors) != 4 || b.Status.Selectors[1] != "k8s:pod-label:app:web" {
				t.Fatalf("unexpected selectors %v", b.Status.Selectors)
			}
		})
	}
}

// TestConflictRulesThroughHandler proves each conflict rule as the handler
// applies it, and that a binding of another environment is no peer.
func TestConflictRulesThroughHandler(t *testing.T) {
	pools := []client.Object{
		inferencePoolWithSelector(t, "ns", "p1", `{"app":"one"}`),
		inferencePoolWithSelector(t, "ns", "p2", `{"app":"two"}`),
		inferencePoolWithSelector(t, "other", "p1", `{"app":"one"}`),
	}
	cases := []struct {
		name string
		peer *v1alpha1.IdentityBinding
		want string
	}{
		{"same SPIFFE ID", func() *v1alpha1.IdentityBinding {
			p := binding("other", "peer", "serving", "v2", "p1")
			p.Spec.SPIFFEIDPathTemplate = "ns/ns/sa/serving/pool/p1/variant/v1"
			return p
		}(), v1alpha1.ReasonDuplicateSPIFFEID},
		{"different namespace", binding("other", "peer", "serving", "v1", "p1"), ""},
		{"different service account", binding("ns", "peer", "other", "v1", "p2"), ""},
		{"different variant", binding("ns", "peer", "serving", "v2", "p2"), ""},
		{"same namespace, service account and variant", binding("ns", "peer", "serving", "v1", "p2"), v1alpha1.ReasonVariantConflict},
		{"other environment", func() *v1alpha1.IdentityBinding {
			p := binding("ns", "peer", "serving", "v1", "p2")
			p.Labels[labels.Environment] = "prod"
			return p
		}(), ""},
		{"peer with an invalid variant holds nothing", binding("ns", "peer", "serving", " v1", "p2"), ""},
		{"a deleting peer counts until its finalizer is gone", func() *v1alpha1.IdentityBinding {
			p := binding("ns", "peer", "serving", "v1", "p2")
			now := metav1.Now()
			p.DeletionTimestamp = &now
			p.Finalizers = []string{labels.Finalizer}
			return p
		}(), v1alpha1.ReasonVariantConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			self := binding("ns", "self", "serving", "v1", "p1")
			c := newClient(t, nil, append([]client.Object{self, tc.peer}, pools...)...)
			h := newHandler(t, c)
			err := reconcile(t, h, c, self)
			if tc.want == "" {
				if err != nil || len(self.Status.Conflicts) != 0 {
					t.Fatalf("want no conflict, got %v, %v", err, self.Status.Conflicts)
				}
				return
			}
			if got := ctrlerrors.Reason(err, ""); got != tc.want {
				t.Fatalf("want %s, got %q (%v)", tc.want, got, err)
			}
			want := []v1alpha1.Conflict{{Peer: tc.peer.Namespace + "/peer", Cause: tc.want}}
			if len(self.Status.Conflicts) != 1 || self.Status.Conflicts[0] != want[0] {
				t.Fatalf("want conflicts %v, got %v", want, self.Status.Conflicts)
			}
			if f := failureConditions(self); f[v1alpha1.ConditionConflict] != tc.want || len(f) != 1 {
				t.Fatalf("want exactly Conflict=%s, got %v", tc.want, f)
			}
			if entryCount(t, c) != 0 {
				t.Fatal("a conflict member must keep no output")
			}
			// The peer reaches the same verdict about self.
			if err := reconcile(t, h, c, tc.peer); ctrlerrors.Reason(err, "") != tc.want {
				t.Fatalf("peer: want %s, got %v", tc.want, err)
			}
		})
	}
}

// TestConflictWithdrawsExistingOutput proves a Ready binding that gains a
// conflict deletes its output and reports the conflict settled only once
// the output is gone.
func TestConflictWithdrawsExistingOutput(t *testing.T) {
	self := binding("ns", "self", "serving", "v1", "p1")
	c := newClient(t, nil, self, inferencePoolWithSelector(t, "ns", "p1", `{"app":"one"}`), inferencePoolWithSelector(t, "ns", "p2", `{"app":"two"}`))
	h := newHandler(t, c)
	if err := reconcile(t, h, c, self); err != nil || entryCount(t, c) != 1 {
		t.Fatalf("want Ready with an output, got %v", err)
	}
	if err := c.Create(context.Background(), binding("ns", "peer", "serving", "v1", "p2")); err != nil {
		t.Fatal(err)
	}
	err := reconcile(t, h, c, self)
	if ctrlerrors.Reason(err, "") != v1alpha1.ReasonVariantConflict || !ctrlerrors.IsBlocked(err) {
		t.Fatalf("want a settled VariantConflict, got %v", err)
	}
	if entryCount(t, c) != 0 || len(self.Status.Outputs) != 0 {
		t.Fatalf("output not withdrawn: %d entries, outputs %v", entryCount(t, c), self.Status.Outputs)
	}
}

// TestPeerOutputPending proves a binding does not write its output while a
// peer's output for the same workloads still exists.
func TestPeerOutputPending(t *testing.T) {
	self := binding("ns", "self", "serving", "v1", "p1")
	stale := &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: "stale", Labels: map[string]string{
		labels.Environment: env, labels.OwnerUID: "someone",
		index.LabelGroup: index.GroupKey("ns", "serving", "v1"),
	}}}
	c := newClient(t, nil, self, stale, inferencePoolWithSelector(t, "ns", "p1", `{"app":"one"}`))
	err := reconcile(t, newHandler(t, c), c, self)
	if ctrlerrors.Reason(err, "") != v1alpha1.ReasonPeerOutputPending {
		t.Fatalf("want PeerOutputPending, got %v", err)
	}
	if _, ok := ctrlerrors.AsRetryable(err); !ok {
		t.Fatalf("want a retry, got %v", err)
	}
	if entryCount(t, c) != 1 {
		t.Fatal("no output may be written while a peer's output is pending")
	}
}

// TestForeignOutputUntouched proves an object in the way is never adopted.
func TestForeignOutputUntouched(t *testing.T) {
	self := binding("ns", "self", "serving", "v1", "p1")
	foreign := &spiffev1alpha1.SpiffeEntry{
		ObjectMeta: metav1.ObjectMeta{Name: output.Name("ns", "self"), Labels: map[string]string{labels.Environment: env}},
		Spec:       spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/x", ParentID: "spiffe://example.org/y", Selectors: []string{"k8s:ns:x"}},
	}
	c := newClient(t, nil, self, foreign, inferencePoolWithSelector(t, "ns", "p1", `{"app":"one"}`))
	before := &spiffev1alpha1.SpiffeEntry{}
	_ = c.Get(context.Background(), client.ObjectKeyFromObject(foreign), before)
	err := reconcile(t, newHandler(t, c), c, self)
	if ctrlerrors.Reason(err, "") != v1alpha1.ReasonManagedOutputApplyFailed {
		t.Fatalf("want ManagedOutputApplyFailed, got %v", err)
	}
	after := &spiffev1alpha1.SpiffeEntry{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(foreign), after); err != nil {
		t.Fatalf("foreign object deleted: %v", err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatal("foreign object was changed")
	}
}

// TestForeignOutputBlocksEveryKind proves that with both outputs
// configured, a foreign ClusterSPIFFEID stops the SpiffeEntry from being
// written too, so a pass never writes one kind and withdraws it again.
func TestForeignOutputBlocksEveryKind(t *testing.T) {
	self := binding("ns", "self", "serving", "v1", "p1")
	foreign := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"spiffeIDTemplate": "x"}}}
	foreign.SetGroupVersionKind(output.ClusterSPIFFEIDGVK)
	foreign.SetName(output.Name("ns", "self"))
	c := newClient(t, nil, self, foreign, inferencePoolWithSelector(t, "ns", "p1", `{"app":"one"}`))
	h, err := identitybinding.New(c, c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes", DefaultEnvironment: env,
		Outputs: []output.Kind{output.KindSpiffeEntry, output.KindClusterSPIFFEID},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = reconcile(t, h, c, self)
	if ctrlerrors.Reason(err, "") != v1alpha1.ReasonManagedOutputApplyFailed || !ctrlerrors.IsBlocked(err) {
		t.Fatalf("want blocked ManagedOutputApplyFailed, got %v", err)
	}
	if entryCount(t, c) != 0 {
		t.Fatal("no SpiffeEntry may be written while the ClusterSPIFFEID is blocked")
	}
	if f := failureConditions(self); f[v1alpha1.ConditionRenderFailure] != v1alpha1.ReasonManagedOutputApplyFailed {
		t.Fatalf("want RenderFailure=ManagedOutputApplyFailed, got %v", f)
	}
}
