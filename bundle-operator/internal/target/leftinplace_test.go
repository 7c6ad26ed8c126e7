package target

import (
	"context"
	"strings"
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

// TestAReleaseTheAPIServerRefusesIsLeftInPlaceAndNotRetriedUntilTheObjectChanges:
// a shared target whose other writer made it immutable cannot lose our
// keys. Its release is reported as left in place, not as a failure (a
// failure would hold up the pass and the TrustBundle's deletion for as long
// as the other writer likes), and the same object is not written again on
// every pass; once it changes, it is tried again.
func TestAReleaseTheAPIServerRefusesIsLeftInPlaceAndNotRetriedUntilTheObjectChanges(t *testing.T) {
	applies := 0
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, _ runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			applies++
			return apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "ca",
				field.ErrorList{field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")})
		},
	}).Build()
	o := &Objects{Client: c}
	shared := func(rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ca", UID: "u1", ResourceVersion: rv,
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply},
				{Manager: "kubectl-patch", Operation: metav1.ManagedFieldsOperationUpdate},
			}}}
	}
	rep := o.release(context.Background(), "tb", KindConfigMap, shared("10"))
	if rep.FailedCount != 0 || rep.Written != 0 || len(rep.Left) != 1 || !strings.Contains(rep.Left[0], "ConfigMap ns/ca") {
		t.Fatalf("first release: %+v, want one target left in place and no failure", rep)
	}
	if rep := o.release(context.Background(), "tb", KindConfigMap, shared("10")); rep.FailedCount != 0 || len(rep.Left) != 0 || applies != 1 {
		t.Fatalf("the unchanged object was written again (%d writes) or reported again: %+v", applies, rep)
	}
	if rep := o.release(context.Background(), "other", KindConfigMap, shared("10")); len(rep.Left) != 1 || applies != 2 {
		t.Fatalf("another TrustBundle's release of the object was skipped: %+v, %d writes", rep, applies)
	}
	if rep := o.release(context.Background(), "tb", KindConfigMap, shared("11")); len(rep.Left) != 1 || applies != 3 {
		t.Fatalf("the changed object was not tried again: %+v, %d writes", rep, applies)
	}
	o.left.keepOnly("tb", KindConfigMap, nil)
	if rep := o.release(context.Background(), "tb", KindConfigMap, shared("11")); len(rep.Left) != 1 || applies != 4 {
		t.Fatalf("a record of an object no longer to release was kept: %+v, %d writes", rep, applies)
	}
}
