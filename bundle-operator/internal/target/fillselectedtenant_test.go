package target

import (
	"context"
	"slices"
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

// TestFillGivesANewNamespaceTheBundleWhateverATenantWritesInItsSelectedNamespace:
// the TrustBundle selects the tenant's namespace and a namespace that
// starts matching while the sources fail. The only target that exists is
// the one in the tenant's namespace, whose hash annotation the tenant
// edited (kubectl edit: the annotation is no longer the operator's). The
// new namespace must still get the last good bundle: whoever may edit
// ConfigMaps in one namespace must not decide what another namespace gets.
func TestFillGivesANewNamespaceTheBundleWhateverATenantWritesInItsSelectedNamespace(t *testing.T) {
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"tenant", "newcomer"},
		Data: map[string][]byte{"ca.crt": []byte("pem")}, Labels: map[string]string{LabelTrustBundle: "b"}}
	edited := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "ca",
		Labels:      map[string]string{LabelTrustBundle: "b"},
		Annotations: map[string]string{AnnotationHash: "chosen-by-the-tenant"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			withVersion(managed(FieldManager, metav1.ManagedFieldsOperationApply, `{"f:data":{"f:ca.crt":{}}}`)),
			withVersion(managed("kubectl-edit", metav1.ManagedFieldsOperationUpdate, `{"f:metadata":{"f:annotations":{"f:`+AnnotationHash+`":{}}}}`)),
		}}}
	var (
		mu      sync.Mutex
		applied []string
	)
	writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			u := obj.(interface{ GetNamespace() string })
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, u.GetNamespace())
			return nil
		},
	}).Build()
	o := &Objects{
		Cache:  withManagedFields{fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(edited).Build(), edited.ManagedFields},
		Client: writer,
	}
	rep, err := o.Fill(context.Background(), d)
	if err != nil {
		t.Fatalf("Fill() error = %v: the newcomer gets no bundle because of the tenant's annotation", err)
	}
	if !slices.Contains(applied, "newcomer") || rep.FailedCount != 0 {
		t.Errorf("applied in %v (report %+v), want the newcomer's target created", applied, rep)
	}
}

func withVersion(e metav1.ManagedFieldsEntry) metav1.ManagedFieldsEntry {
	e.APIVersion = "v1"
	return e
}
