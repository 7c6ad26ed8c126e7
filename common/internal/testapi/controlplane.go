package testapi

import (
	"fmt"
	"path/filepath"
	"runtime"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

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
