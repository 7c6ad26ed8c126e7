package target

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAdversarialAForgedTrustBundleLabelDoesNotMakeAnObjectOurs: guarantee 2
// says the operator writes only objects whose owner labels parse exactly
// to its own (owner UID, kind, name, environment). A tenant puts only the
// cache-selecting label bundle.trustplane.dev/trustbundle=b on a ConfigMap
// of the target's name that they (kubectl-create) created in their
// selected namespace, holding their own ca.crt; its owner labels name no
// owner, or another TrustBundle's UID and another environment. Expected:
// the object is not ours, so it is at most written without force (which
// conflicts on their ca.crt and leaves it alone). Observed behaviour is
// checked by the force flag of the write.
func TestAdversarialAForgedTrustBundleLabelDoesNotMakeAnObjectOurs(t *testing.T) {
	ours := map[string]string{LabelTrustBundle: "b", "trustplane.dev/environment": "prod",
		"trustplane.dev/owner-uid": "uid-of-b", "trustplane.dev/owner-kind": "TrustBundle", "trustplane.dev/owner-name": "b"}
	for name, forged := range map[string]map[string]string{
		"only the cache label": {LabelTrustBundle: "b"},
		"another owner UID and environment": {LabelTrustBundle: "b", "trustplane.dev/environment": "staging",
			"trustplane.dev/owner-uid": "uid-of-someone-else", "trustplane.dev/owner-kind": "TrustBundle", "trustplane.dev/owner-name": "b"},
	} {
		t.Run(name, func(t *testing.T) {
			d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"tenant"},
				Data: map[string][]byte{"ca.crt": []byte("pem")}, Labels: ours}
			theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "ca", Labels: forged},
				Data: map[string]string{"ca.crt": "the tenant's own CA"}}
			var (
				mu     sync.Mutex
				forced []string
			)
			writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
					ao := (&client.ApplyOptions{}).ApplyOptions(opts)
					if ao.Force != nil && *ao.Force {
						mu.Lock()
						forced = append(forced, obj.(interface{ GetNamespace() string }).GetNamespace())
						mu.Unlock()
					}
					return nil
				},
			}).Build()
			cache := withManagedFields{fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(theirs).Build(),
				[]metav1.ManagedFieldsEntry{withVersion(managed("kubectl-create", metav1.ManagedFieldsOperationUpdate,
					`{"f:data":{"f:ca.crt":{}},"f:metadata":{"f:labels":{}}}`))}}
			o := &Objects{Cache: cache, Client: writer, Live: cache}
			o.Sync(context.Background(), d)
			if len(forced) > 0 {
				t.Fatalf("force-applied the target over the tenant's object in %v: its owner labels %v do not parse to TrustBundle b (uid-of-b, prod)", forced, forged)
			}
		})
	}
}

// TestAdversarialAnotherOwnersTargetIsNeverReleased: every instance and every
// TrustBundle writes with the same field manager, so the managed fields
// cannot tell whose target an object is; only the owner labels can. An
// object labelled as TrustBundle b's target by another owner (another
// instance's environment, another UID: a TrustBundle of that name that
// was force-deleted and recreated, or the same name in another
// environment) sits in a namespace the current TrustBundle b does not
// select. Guarantee 2: the operator deletes only objects whose owner
// labels parse exactly to its own, also on orphan collection. Expected: no
// delete and no write.
func TestAdversarialAnotherOwnersTargetIsNeverReleased(t *testing.T) {
	ours := map[string]string{LabelTrustBundle: "b", "trustplane.dev/environment": "prod",
		"trustplane.dev/owner-uid": "uid-of-b", "trustplane.dev/owner-kind": "TrustBundle", "trustplane.dev/owner-name": "b"}
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "ca", UID: "cm-uid", ResourceVersion: "5",
		Labels: map[string]string{LabelTrustBundle: "b", "trustplane.dev/environment": "staging",
			"trustplane.dev/owner-uid": "uid-of-another-b", "trustplane.dev/owner-kind": "TrustBundle", "trustplane.dev/owner-name": "b"}},
		Data: map[string]string{"ca.crt": "another instance's bundle"}}
	var (
		mu      sync.Mutex
		touched []string
	)
	writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(foreign).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			mu.Lock()
			defer mu.Unlock()
			touched = append(touched, "apply "+obj.(interface{ GetNamespace() string }).GetNamespace())
			return nil
		},
		Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
			mu.Lock()
			defer mu.Unlock()
			touched = append(touched, "delete "+obj.GetNamespace()+"/"+obj.GetName())
			return nil
		},
	}).Build()
	cache := withManagedFields{fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(foreign).Build(),
		[]metav1.ManagedFieldsEntry{withVersion(managed(FieldManager, metav1.ManagedFieldsOperationApply,
			`{"f:data":{"f:ca.crt":{}},"f:metadata":{"f:labels":{}}}`))}}
	o := &Objects{Cache: cache, Client: writer, Live: cache}
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: nil,
		Data: map[string][]byte{"ca.crt": []byte("pem")}, Labels: ours}
	o.Sync(context.Background(), d)
	o.ReleaseAll(context.Background(), KindConfigMap, ours)
	if len(touched) > 0 {
		t.Fatalf("wrote to another owner's target: %v (its owner labels name uid-of-another-b in staging, not uid-of-b in prod)", touched)
	}
}
