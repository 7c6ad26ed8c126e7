package testapi

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/testenv"
)

// StartControlPlane starts a control plane that serves Widget, with a scheme
// holding client-go's kinds and Widget: the setup of every framework test.
func StartControlPlane() (*testenv.ControlPlane, error) {
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("client-go scheme: %w", err)
	}
	if err := widgetv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("widget scheme: %w", err)
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("locate the widget CRD")
	}
	crds := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "crd")
	return testenv.StartControlPlane(testenv.ControlPlaneOptions{CRDDirectoryPaths: []string{crds}, Scheme: scheme})
}

// NewNamespace creates a namespace named prefix and a random suffix through
// c and returns its name.
func NewNamespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace %s*: %w", prefix, err)
	}
	return ns.Name, nil
}

// PlaneForTest starts a control plane (StartControlPlane) for a plain Go
// test, stopped when the test ends, and creates a namespace named prefix
// and a random suffix in it; the test fails at once if either fails.
func PlaneForTest(t testing.TB, prefix string) (client.Client, string) {
	t.Helper()
	plane, err := StartControlPlane()
	if err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	t.Cleanup(func() { _ = plane.Stop() })
	ns, err := NewNamespace(context.Background(), plane.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return plane.Client, ns
}

// SharedPlane is one control plane (StartControlPlane) for the plain tests
// of a package, started by the first that asks for it; the package's
// TestMain stops it after m.Run. Each test gets a namespace of its own.
type SharedPlane struct {
	once  sync.Once
	plane *testenv.ControlPlane
	err   error
}

// For returns the shared control plane's client and a new namespace named
// prefix and a random suffix; the test fails at once if either fails.
func (s *SharedPlane) For(t testing.TB, prefix string) (client.Client, string) {
	t.Helper()
	plane := s.Plane(t)
	ns, err := NewNamespace(context.Background(), plane.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return plane.Client, ns
}

// Plane returns the shared control plane itself (its admin Config serves
// clients other than controller-runtime's), started by the first test that
// asks; the test fails at once if it cannot start.
func (s *SharedPlane) Plane(t testing.TB) *testenv.ControlPlane {
	t.Helper()
	s.once.Do(func() { s.plane, s.err = StartControlPlane() })
	if s.err != nil {
		t.Fatalf("start the control plane: %v", s.err)
	}
	return s.plane
}

// Stop stops the control plane, if a test started it.
func (s *SharedPlane) Stop() error {
	if s.plane == nil {
		return nil
	}
	return s.plane.Stop()
}

// LiveConfigMaps returns the sorted names of the ConfigMaps of namespace
// that opts select and that are not being deleted.
func LiveConfigMaps(ctx context.Context, c client.Reader, namespace string, opts ...client.ListOption) ([]string, error) {
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, append([]client.ListOption{client.InNamespace(namespace)}, opts...)...); err != nil {
		return nil, fmt.Errorf("list ConfigMaps of %s: %w", namespace, err)
	}
	var names []string
	for _, cm := range list.Items {
		if cm.DeletionTimestamp == nil {
			names = append(names, cm.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}
