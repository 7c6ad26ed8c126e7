package target

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAClusterTrustBundleTheAPIServerRefusesToReleaseIsLeftInPlace: the
// TrustBundle is deleted (Sync with no name releases every
// ClusterTrustBundle of it). One is shared with another writer and is not
// valid without the trustBundle field only we own, so the API server
// refuses the release as Invalid (shared.ErrLeftInPlace). As for ConfigMap
// and Secret targets, it must be left in place and reported, not counted
// as a failure that holds up the deletion for as long as the other writer
// likes.
func TestAClusterTrustBundleTheAPIServerRefusesToReleaseIsLeftInPlace(t *testing.T) {
	ctb := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "corp-roots", UID: "u1", ResourceVersion: "10",
		Labels: map[string]string{LabelTrustBundle: "tb"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			managed(FieldManager, metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:trustBundle":{}}}`),
			managed("someone-else", metav1.ManagedFieldsOperationApply, `{"f:metadata":{"f:annotations":{"f:note":{}}}}`),
		}}}
	for i := range ctb.ManagedFields {
		ctb.ManagedFields[i].APIVersion = "certificates.k8s.io/v1"
	}
	ctb.SetGroupVersionKind(ClusterTrustBundleGVK)
	writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, _ runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			return apierrors.NewInvalid(schema.GroupKind{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}, "corp-roots",
				field.ErrorList{field.Invalid(field.NewPath("spec", "trustBundle"), "", "at least one trust anchor must be provided")})
		},
	}).Build()
	c := &ClusterTrustBundles{
		Cache: fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
			List: func(_ context.Context, _ client.WithWatch, list client.ObjectList, _ ...client.ListOption) error {
				list.(*metav1.PartialObjectMetadataList).Items = []metav1.PartialObjectMetadata{*ctb.DeepCopy()}
				return nil
			},
		}).Build(),
		Client: writer,
	}
	rep := c.Sync(context.Background(), "", nil, map[string]string{LabelTrustBundle: "tb"})
	if rep.FailedCount != 0 || len(rep.Left) != 1 {
		t.Errorf("release of the deleted TrustBundle's ClusterTrustBundles: %+v; want it left in place, no failure", rep)
	}
}
