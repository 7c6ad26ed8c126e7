package target

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/shared"
)

// TestFillCreatesOnlyWhereNoObjectExists proves Fill's two guards: it
// applies only in namespaces where neither the cache (our targets) nor the
// API server (any object of that name) holds the target (its write is
// create-only: the server refuses it with a conflict where an object of
// that name exists, modelled here), and it creates
// nothing when the existing targets do not carry the hash of what it was
// given, since that would not be what they hold, unless each of them is
// frozen (immutable: a dry-run write of the bundle is refused by the API
// server's validation of its fields, modelled here), since a frozen target
// holds what it held when someone froze it.
func TestFillCreatesOnlyWhereNoObjectExists(t *testing.T) {
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"ours", "foreign", "new"},
		Data: map[string][]byte{"ca.crt": []byte("pem")}, Labels: map[string]string{LabelTrustBundle: "b"}}
	target := func(hash string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ours", Name: "ca",
			Labels: map[string]string{LabelTrustBundle: "b"}, Annotations: map[string]string{AnnotationHash: hash}}}
	}
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "foreign", Name: "ca"}}

	immutable := apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), "ca", field.ErrorList{
		field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")})
	webhook := apierrors.NewForbidden(corev1.Resource("configmaps"), "ca", errors.New("admission webhook denied the request"))
	for _, tc := range []struct {
		name        string
		existing    string
		probe       error
		wantApplied []string
		wantProbed  []string
		wantErr     string
	}{
		{"existing targets hold the same bundle", Hash(d.Data), nil, []string{"new"}, nil, ""},
		{"existing targets hold another bundle", "other", nil, nil, []string{"ours"}, "hold a bundle other than"},
		{"the targets holding another bundle are frozen", "other", immutable, []string{"new"}, []string{"ours"}, ""},
		{"a probe refused by a webhook", "other", webhook, nil, []string{"ours"}, "admission webhook denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours := target(tc.existing)
			var (
				mu              sync.Mutex
				applied, probed []string
			)
			writer := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
					u := obj.(interface {
						GetNamespace() string
						GetResourceVersion() string
					})
					if (&client.ApplyOptions{}).ApplyOptions(opts).DryRun != nil {
						mu.Lock()
						defer mu.Unlock()
						probed = append(probed, u.GetNamespace())
						return tc.probe
					}
					if u.GetResourceVersion() == shared.CreateOnly && (u.GetNamespace() == ours.Namespace || u.GetNamespace() == foreign.Namespace) {
						return apierrors.NewConflict(corev1.Resource("configmaps"), "ca", errors.New("the object has been modified"))
					}
					mu.Lock()
					defer mu.Unlock()
					applied = append(applied, u.GetNamespace())
					return nil
				},
			}).Build()
			o := &Objects{
				Cache:  ourHashAnnotation(fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(ours).Build()),
				Client: writer,
			}
			rep, err := o.Fill(context.Background(), d)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Fill() error = %v, want %q", err, tc.wantErr)
			}
			if !slices.Equal(applied, tc.wantApplied) || rep.Written != len(tc.wantApplied) || rep.FailedCount != 0 {
				t.Errorf("applied in %v (report %+v), want %v", applied, rep, tc.wantApplied)
			}
			if !slices.Equal(probed, tc.wantProbed) {
				t.Errorf("dry-run writes in %v, want %v", probed, tc.wantProbed)
			}
		})
	}
}

// TestInjectionFillDecision proves which annotated objects Fill writes: only
// those whose caBundle fields are all empty or already hold the bundle, never
// one holding any other caBundle.
func TestInjectionFillDecision(t *testing.T) {
	const want, other = "V0FOVA==", "T1RIRVI="
	webhooks := func(values ...string) *unstructured.Unstructured {
		var hooks []any
		for i, v := range values {
			cc := map[string]any{"url": "https://x.invalid"}
			if v != "" {
				cc["caBundle"] = v
			}
			hooks = append(hooks, map[string]any{"name": string(rune('a'+i)) + ".example.com", "clientConfig": cc})
		}
		u := &unstructured.Unstructured{Object: map[string]any{"webhooks": hooks}}
		u.SetGroupVersionKind(ValidatingWebhookConfigurationGVK)
		u.SetName("w")
		return u
	}
	for _, tc := range []struct {
		name           string
		values         []string
		inSync, filled bool
	}{
		{"never injected", []string{"", ""}, false, true},
		{"a webhook added next to one holding the bundle", []string{want, ""}, false, true},
		{"already holding the bundle", []string{want, want}, true, true},
		{"holding another caBundle", []string{other, ""}, false, false},
		{"partly holding another caBundle", []string{want, other}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, current, err := injection(ValidatingWebhookConfigurationGVK, webhooks(tc.values...), want)
			if err != nil {
				t.Fatal(err)
			}
			if got := holdsOnly(current, want); got != tc.inSync {
				t.Errorf("in sync = %v, want %v (current %q)", got, tc.inSync, current)
			}
			if got := holdsOnly(current, "", want); got != tc.filled {
				t.Errorf("fillable = %v, want %v (current %q)", got, tc.filled, current)
			}
		})
	}
}

// withManagedFields is a cache whose listed objects carry the managed
// fields given, as the API server records them (the fake client keeps
// none).
type withManagedFields struct {
	client.Reader
	fields []metav1.ManagedFieldsEntry
}

// ourHashAnnotation is what our own apply of the hash annotation and the
// TrustBundle label records.
func ourHashAnnotation(r client.Reader) withManagedFields {
	return withManagedFields{r, []metav1.ManagedFieldsEntry{managed(FieldManager, metav1.ManagedFieldsOperationApply,
		`{"f:metadata":{"f:annotations":{"f:`+AnnotationHash+`":{}},"f:labels":{"f:`+LabelTrustBundle+`":{}}}}`)}}
}

func (r withManagedFields) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if err := r.Reader.List(ctx, l, opts...); err != nil {
		return err
	}
	if pl, ok := l.(*metav1.PartialObjectMetadataList); ok {
		for i := range pl.Items {
			pl.Items[i].ManagedFields = r.fields
		}
	}
	return nil
}
