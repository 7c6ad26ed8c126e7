package testenv

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Main is a TestMain for test binaries that start a control plane but log
// nothing of controller-runtime's: it discards controller-runtime's logs
// (see DiscardControllerRuntimeLogs), then runs m's tests and exits with
// their result. A test binary with a TestMain of its own (to start a shared
// control plane, say) calls DiscardControllerRuntimeLogs instead.
func Main(m *testing.M) {
	DiscardControllerRuntimeLogs()
	os.Exit(m.Run())
}

// DiscardControllerRuntimeLogs gives controller-runtime a logger that
// discards. Without any logger, controller-runtime prints a warning with a
// stack trace the first time it logs.
func DiscardControllerRuntimeLogs() {
	log.SetLogger(logr.Discard())
}
