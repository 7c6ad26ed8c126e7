package charts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/trustplane/trustplane/common/ownpolicy"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// TestOwnResourcesPoliciesAreGenerated proves each operator's
// own-resources policy and binding (which the chart copies) are what
// common/ownpolicy renders from the operator's CRDs today: a kind added
// to an operator is held by its policy once make generate runs, and no
// operator's copy drifts from the others'.
func TestOwnResourcesPoliciesAreGenerated(t *testing.T) {
	for _, o := range operatorimage.Operators() {
		op, err := ownpolicy.FromCRDs(o.Name, filepath.Join(env.root, o.Name, "config", "crd", "bases"))
		if err != nil {
			t.Fatalf("%s: %v", o.Name, err)
		}
		policy, err := op.Policy()
		if err != nil {
			t.Fatal(err)
		}
		binding, err := op.Binding()
		if err != nil {
			t.Fatal(err)
		}
		for file, want := range map[string][]byte{ownpolicy.PolicyFile: policy, ownpolicy.BindingFile: binding} {
			path := filepath.Join(o.Name, "config", "rbac", file)
			got, err := os.ReadFile(filepath.Join(env.root, path))
			if err != nil {
				t.Errorf("%s: %v (run make generate)", path, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is not what common/ownpolicy renders from the operator's CRDs: run make generate", path)
			}
		}
	}
}
