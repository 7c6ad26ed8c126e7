package bench

import (
	"testing"

	"github.com/trustplane/trustplane/common/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
