package janitor_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/trustplane/trustplane/common/internal/testapi"
)

// plane is the control plane of this package's plain tests against a real
// API server (the Ginkgo suite has its own).
var plane testapi.SharedPlane

func TestMain(m *testing.M) {
	code := m.Run()
	if err := plane.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the control plane:", err)
	}
	os.Exit(code)
}
