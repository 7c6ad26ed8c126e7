package trustbundle

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestDeletingATrustBundleWhileItsLastWriteIsNotInTheCacheLeavesNoTarget:
// the operator's target cache is an informer, so it shows a write of the
// operator's only once the watch event arrives. A TrustBundle deleted right
// after a pass wrote a target (deleted during a fan-out or a rotation, or
// created and deleted in one script) gets its Delete before the cache
// shows that write. Delete then either does not list the target at all (a
// create the cache has not seen) or lists it at its older version and
// release skips it because a write of ours is still expected (the
// expectations), reporting neither a release nor a failure. Delete returns
// nil, the framework removes the finalizer, and the target stays for good:
// labelled as the target of a TrustBundle that no longer exists, holding a
// bundle nothing will update again (a CA revoked later stays trusted
// there), and never released, since no pass of that TrustBundle runs again.
//
// Expected (docs: "Deleting the TrustBundle releases every ConfigMap and
// Secret target"; a failure is retried): Delete releases the target, or
// returns an error so that the deletion is retried until the cache shows
// the write and the release can happen.
func TestDeletingATrustBundleWhileItsLastWriteIsNotInTheCacheLeavesNoTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cached: the cache holds the target at an older version (an
		// update of ours is in flight); otherwise it holds nothing yet
		// (our create is in flight).
		cached bool
		// ctb: the target is a ClusterTrustBundle (no expectations at
		// all: Delete lists the cache alone) instead of a ConfigMap.
		ctb bool
		// written is the target the pass writes.
		written string
	}{
		{name: "an update of the target not yet in the cache", cached: true, written: "apply team/ca"},
		{name: "the create of the target not yet in the cache", written: "apply team/ca"},
		{name: "the create of a ClusterTrustBundle not yet in the cache", ctb: true, written: "apply /b-bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tb := &v1alpha1.TrustBundle{
				ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
				Spec: v1alpha1.TrustBundleSpec{
					Sources: []v1alpha1.Source{{Inline: testpki.ValidCA("current").PEM()}},
					Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
				},
			}
			if tc.ctb {
				tb.Spec.Target = v1alpha1.Target{ClusterTrustBundle: &v1alpha1.ClusterTrustBundleTarget{Name: "b-bundle"}}
			}
			var lagging lagCache
			if tc.cached {
				// Our target as the cache last saw it: written by us
				// at resourceVersion 5 with the bundle before.
				m := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
					Namespace: "team", Name: "ca", ResourceVersion: "5", UID: "cm-uid",
					Labels:      targetLabels(ctx, tb),
					Annotations: map[string]string{target.AnnotationHash: "hash-of-the-bundle-before"},
					ManagedFields: []metav1.ManagedFieldsEntry{{
						Manager: target.FieldManager, Operation: metav1.ManagedFieldsOperationApply,
						FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:ca.crt":{}},"f:metadata":{"f:annotations":{"f:bundle.trustplane.dev/hash":{}}}}`)},
					}},
				}}
				lagging.items = append(lagging.items, m)
			}

			var (
				mu       sync.Mutex
				deleting bool
				// wrote: the pass's writes; touched: the writes and
				// deletes Delete sends.
				wrote, touched []string
			)
			api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
					o := obj.(interface {
						GetNamespace() string
						GetName() string
						SetResourceVersion(string)
					})
					// The API server answers with the new version.
					o.SetResourceVersion("9")
					mu.Lock()
					defer mu.Unlock()
					what := fmt.Sprintf("apply %s/%s", o.GetNamespace(), o.GetName())
					if deleting {
						touched = append(touched, what)
					} else {
						wrote = append(wrote, what)
					}
					return nil
				},
				Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
					mu.Lock()
					defer mu.Unlock()
					touched = append(touched, fmt.Sprintf("delete %s/%s", obj.GetNamespace(), obj.GetName()))
					return nil
				},
			}).Build()
			namespaces := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
				WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}).Build()
			noInjection := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return nil },
			}).Build()
			h := &Handler{
				Sources: &source.Resolver{Reader: namespaces},
				Objects: &target.Objects{Cache: &lagging, Client: api, Live: &lagging,
					Expectations: target.NewExpectations()},
				Injector:   &target.Injector{Cache: noInjection, Live: noInjection, Client: api},
				Namespaces: namespaces,
			}
			if tc.ctb {
				h.ClusterTrustBundles = &target.ClusterTrustBundles{Cache: &lagging, Live: &lagging, Client: api}
			}

			// The pass writes the target; the cache does not show it yet.
			if err := h.CreateOrUpdate(ctx, tb); err != nil {
				t.Fatalf("pass: %v", err)
			}

			// The TrustBundle is deleted now.
			mu.Lock()
			if len(wrote) != 1 || wrote[0] != tc.written {
				t.Fatalf("the pass wrote %v, want %s", wrote, tc.written)
			}
			deleting = true
			mu.Unlock()
			err := h.Delete(ctx, tb)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && len(touched) == 0 {
				t.Errorf("Delete returned nil without releasing the target the pass just wrote (%s): the finalizer goes and the target stays for good, labelled as a TrustBundle's that no longer exists", tc.written)
			}
		})
	}
}

// lagCache is a metadata cache that has not seen the operator's last write:
// it holds fixed items.
type lagCache struct {
	items []metav1.PartialObjectMetadata
}

func (c *lagCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return envMoveMeta{items: c.items}.Get(ctx, key, obj)
}

func (c *lagCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return envMoveMeta{items: c.items}.List(ctx, list, opts...)
}
