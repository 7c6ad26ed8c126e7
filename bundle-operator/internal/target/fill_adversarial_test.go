package target

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAdversarialATenantWhoInflatesItsTargetCannotStopTheFill: the frozen-target
// fix (TestFillProbesTheTargetsHoldingAnotherBundleUntilOneIsWritable)
// passes over a target the API server refuses for its immutable data. A
// tenant reaches the same state without immutable: they add a key of their
// own to the target in their selected namespace, big enough that the next
// (larger) bundle no longer fits the 1 MiB a ConfigMap may hold. The
// bundle change then fails there (the target keeps the old hash, still
// under our Apply entry), and while a source later fails, the dry-run probe
// of the last good bundle is refused by the API server for the size of the
// whole object, the error ValidateConfigMap returns:
// field.TooLong(field.NewPath(""), "", 1048576), a cause without a field.
// Expected: that target says nothing about what we published, like a
// frozen one, and the newcomer namespace gets the last good bundle.
func TestAdversarialATenantWhoInflatesItsTargetCannotStopTheFill(t *testing.T) {
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"tenant", "newcomer"},
		Data: map[string][]byte{"ca.crt": []byte("pem of the last good bundle")}, Labels: map[string]string{LabelTrustBundle: "b"}}
	inflated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "ca",
		Labels: map[string]string{LabelTrustBundle: "b"}, Annotations: map[string]string{AnnotationHash: "hash-of-the-previous-bundle"}}}
	tooLong := apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), "ca", field.ErrorList{
		field.TooLong(field.NewPath(""), "", 1<<20)})
	var (
		mu      sync.Mutex
		applied []string
	)
	writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			ns := obj.(interface{ GetNamespace() string }).GetNamespace()
			if (&client.ApplyOptions{}).ApplyOptions(opts).DryRun != nil {
				if ns == "tenant" {
					return tooLong
				}
				return nil
			}
			if ns == "tenant" {
				return apierrors.NewConflict(corev1.Resource("configmaps"), "ca", nil)
			}
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, ns)
			return nil
		},
	}).Build()
	o := &Objects{
		Cache:  ourHashAnnotation(fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(inflated).Build()),
		Client: writer,
	}
	_, err := o.Fill(context.Background(), d)
	if err != nil || !slices.Contains(applied, "newcomer") {
		t.Fatalf("Fill() = %v, created in %v: the tenant's oversized target keeps the newcomer from getting the last good bundle", err, applied)
	}
}
