package trustbundle

import (
	"context"
	"slices"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
)

// envMoveMeta is a metadata cache over fixed ConfigMap targets.
type envMoveMeta struct {
	items []metav1.PartialObjectMetadata
}

func (r envMoveMeta) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, it := range r.items {
		if it.Namespace == key.Namespace && it.Name == key.Name {
			gvk := obj.GetObjectKind().GroupVersionKind()
			m := obj.(*metav1.PartialObjectMetadata)
			*m = *it.DeepCopy()
			m.SetGroupVersionKind(gvk)
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
}

func (r envMoveMeta) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	l := list.(*metav1.PartialObjectMetadataList)
	if l.GroupVersionKind().Kind != "ConfigMapList" {
		return nil
	}
	for _, it := range r.items {
		if lo.LabelSelector == nil || lo.LabelSelector.Matches(klabels.Set(it.Labels)) {
			l.Items = append(l.Items, *it.DeepCopy())
		}
	}
	return nil
}

// TestAdversarialDeletingATrustBundleReleasesTargetsWrittenUnderAnotherEnvironmentLabel:
// TrustBundle b (UID uid-b) wrote its ConfigMap target team/ca while it
// carried trustplane.dev/environment=prod. Then an admin removes the label
// (the operator runs without --default-environment, so the Controller
// deletes it with scoped.AnyEnvironment, whose environment is ""), or moves
// it to staging, and deletes b. framework.md: deletion runs "before the
// environment check, so an object whose environment label is missing or
// was removed can always be deleted (its children are then found by owner
// UID across environments)". Expected safe behaviour: Delete releases
// team/ca (only our manager wrote it: it is deleted), or reports it. A
// hole: Delete succeeds, the finalizer goes, and team/ca stays for ever,
// unreported.
func TestAdversarialDeletingATrustBundleReleasesTargetsWrittenUnderAnotherEnvironmentLabel(t *testing.T) {
	for name, envLabel := range map[string]map[string]string{
		"environment label removed":    nil,
		"environment label to staging": {labels.Environment: "staging"},
	} {
		t.Run(name, func(t *testing.T) {
			written := map[string]string{target.LabelTrustBundle: "b", labels.Environment: "prod",
				labels.OwnerUID: "uid-b", labels.OwnerKind: "TrustBundle", labels.OwnerName: "b"}
			cm := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ca", UID: "cm-uid", ResourceVersion: "4",
				Labels: written, Annotations: map[string]string{target.AnnotationHash: "h"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: target.FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:ca.crt":{}}}`)}}}}}
			var (
				mu     sync.Mutex
				writes []string
			)
			writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
					mu.Lock()
					defer mu.Unlock()
					writes = append(writes, "delete "+obj.GetNamespace()+"/"+obj.GetName())
					return nil
				},
			}).Build()
			cache := envMoveMeta{items: []metav1.PartialObjectMetadata{cm}}
			h := &Handler{Objects: &target.Objects{Cache: cache, Live: cache, Client: writer}}
			tb := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "uid-b", Labels: envLabel}}
			err := h.Delete(context.Background(), tb)
			if err == nil && !slices.Contains(writes, "delete team/ca") {
				t.Errorf("Delete() = nil and team/ca (owner uid-b, prod) was neither released nor reported: writes %v; it outlives its TrustBundle", writes)
			}
		})
	}
}
