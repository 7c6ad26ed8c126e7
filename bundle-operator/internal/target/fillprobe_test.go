package target

import (
	"context"
	"errors"
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

// TestFillProbesTheTargetsHoldingAnotherBundleUntilOneIsWritable: while the
// sources fail, with no target carrying the last good bundle's hash, Fill
// probes the others one by one with a dry-run write and stops at the first
// the API server would take (it then creates nothing); targets it refuses
// for their immutable data are passed over. It never writes for real.
func TestFillProbesTheTargetsHoldingAnotherBundleUntilOneIsWritable(t *testing.T) {
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"a", "b", "c", "new"},
		Data: map[string][]byte{"ca.crt": []byte("pem")}, Labels: map[string]string{LabelTrustBundle: "b"}}
	var objs []client.Object
	for _, ns := range []string{"a", "b", "c"} {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca",
			Labels: map[string]string{LabelTrustBundle: "b"}, Annotations: map[string]string{AnnotationHash: "older"}}})
	}
	immutable := apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), "ca", field.ErrorList{
		field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")})
	for _, tc := range []struct {
		name    string
		frozen  map[string]bool
		wantErr bool
	}{
		{"every target writable", map[string]bool{}, true},
		{"one writable after frozen ones", map[string]bool{"a": true, "b": true}, true},
		{"every target frozen", map[string]bool{"a": true, "b": true, "c": true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu              sync.Mutex
				probed, applied []string
			)
			writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
					ns := obj.(interface{ GetNamespace() string }).GetNamespace()
					mu.Lock()
					defer mu.Unlock()
					if (&client.ApplyOptions{}).ApplyOptions(opts).DryRun != nil {
						probed = append(probed, ns)
						if tc.frozen[ns] {
							return immutable
						}
						return nil
					}
					if ns != "new" {
						return apierrors.NewConflict(corev1.Resource("configmaps"), "ca", errors.New("exists"))
					}
					applied = append(applied, ns)
					return nil
				},
			}).Build()
			o := &Objects{
				Cache:  ourHashAnnotation(fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build()),
				Client: writer,
			}
			_, err := o.Fill(context.Background(), d)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Fill() error = %v, want an error: %v", err, tc.wantErr)
			}
			slices.Sort(probed)
			wantProbes := len(tc.frozen) + 1
			if !tc.wantErr {
				wantProbes = len(tc.frozen)
			}
			if len(probed) != wantProbes || len(slices.Compact(slices.Clone(probed))) != len(probed) {
				t.Errorf("probed %v, want %d distinct targets (the frozen ones, then the first writable)", probed, wantProbes)
			}
			if tc.wantErr == (len(applied) > 0) {
				t.Errorf("created the target in %v; want it created only when every other target is frozen", applied)
			}
		})
	}
}
