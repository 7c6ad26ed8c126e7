package bench

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// TestMain gives controller-runtime a logger that discards, before any
// benchmark starts a control plane: without one it prints a warning with a
// stack trace into the results.
func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
