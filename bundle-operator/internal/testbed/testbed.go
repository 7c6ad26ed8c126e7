// Package testbed starts what this module's integration tests run against:
// a real kube-apiserver with the TrustBundle CRD and a real spire-server,
// both from common/testenv, and a SPIRE client of the operator's own
// package spire. It is never used by the operator itself.
package testbed

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/common/spireconn"
)

// TrustDomain is the trust domain of the spire-server.
const TrustDomain = "example.org"

// Bed is a running control plane and spire-server.
type Bed struct {
	// ControlPlane is the kube-apiserver with the TrustBundle CRD installed.
	ControlPlane *testenv.ControlPlane
	// Spire is the spire-server.
	Spire *testenv.Spire
	// SpireClient reads the spire-server through its admin socket.
	SpireClient *spire.Client
}

// Start runs a control plane and a spire-server for t and stops both when
// t ends.
func Start(t testing.TB) *Bed {
	t.Helper()
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{
		CRDDirectoryPaths: []string{CRDDirectory()},
		Scheme:            scheme,
	})
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	sp, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: TrustDomain})
	if err != nil {
		t.Fatalf("start spire: %v", err)
	}
	t.Cleanup(func() { _ = sp.Cleanup() })
	c, err := spire.Dial(context.Background(), spireconn.Options{SocketPath: sp.SocketPath})
	if err != nil {
		t.Fatalf("dial spire: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &Bed{ControlPlane: cp, Spire: sp, SpireClient: c}
}

// CRDDirectory returns the module's config/crd/bases, wherever the test runs.
func CRDDirectory() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "config", "crd", "bases")
}
