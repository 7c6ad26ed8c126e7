package bench

import (
	"os"
	"testing"

	"github.com/trustplane/trustplane/common/testenv"
)

func TestMain(m *testing.M) {
	// A copy of this binary started by TestGCSpansMatchForcedCollections
	// runs its collections and exits, without the tests.
	if os.Getenv(gcChildEnv) == "1" {
		forceCollections(os.Stdout)
		os.Exit(0)
	}
	testenv.Main(m)
}
