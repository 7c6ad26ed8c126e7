package testenv

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Main is a TestMain for test binaries that start a control plane but log
// nothing of controller-runtime's: it gives controller-runtime a logger that
// discards, without which controller-runtime prints a warning with a stack
// trace, then runs m's tests and exits with their result.
func Main(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
