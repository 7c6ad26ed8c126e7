package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/trustplane/trustplane/common/testenv"
)

// Pinned versions of the external CRDs.
const (
	InferenceExtensionModule = "sigs.k8s.io/gateway-api-inference-extension@v1.0.0"
	SpireControllerManager   = "github.com/spiffe/spire-controller-manager@v0.6.3"
)

// ModuleDir returns the module cache directory of module@version,
// downloading it through the Go module proxy when it is not cached.
func ModuleDir(moduleAtVersion string) (string, error) {
	return testenv.ModuleDir(moduleAtVersion)
}

// ExternalCRDs returns the CRD files of the InferencePool
// (inference.networking.k8s.io) and ClusterSPIFFEID kinds.
func ExternalCRDs() ([]string, error) {
	gaie, err := ModuleDir(InferenceExtensionModule)
	if err != nil {
		return nil, err
	}
	scm, err := ModuleDir(SpireControllerManager)
	if err != nil {
		return nil, err
	}
	files := []string{
		filepath.Join(gaie, "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml"),
		filepath.Join(scm, "config", "crd", "bases", "spire.spiffe.io_clusterspiffeids.yaml"),
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("external CRD: %w", err)
		}
	}
	return files, nil
}

// ModuleRoot returns the identity-operator module directory.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// OwnCRDs returns this module's CRDs and the SpiffeEntry CRD of
// spiffe-operator.
func OwnCRDs() []string {
	root := ModuleRoot()
	return []string{
		filepath.Join(root, "config", "crd", "bases"),
		filepath.Join(root, "..", "spiffe-operator", "config", "crd", "bases", "spiffe.trustplane.dev_spiffeentries.yaml"),
	}
}
