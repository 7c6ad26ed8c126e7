package class

// A class name that ValidName (and the CRDs' spec.className pattern)
// accepts must give the instance a leader election lease the API server can
// store, or an instance started with --class-name=<it> and --leader-elect
// never leads (it retries creating an invalid Lease for ever, and its
// LeaseGuard refuses every write).

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/manager"
)

func TestEveryValidClassNameGivesAValidLease(t *testing.T) {
	for _, name := range []string{"blue", "blue.eu-1", "blue..eu", "blue.-eu", "blue-.eu", "a.-b", "a-.b", "a", "0.1"} {
		if err := ValidName(name); err != nil {
			continue // refused up front: fine
		}
		id := manager.Options{LeaderElect: true}.ManagerOptions(manager.InstanceName("spiffe-operator", name)).LeaderElectionID
		// A Lease's name must be a DNS-1123 subdomain (ValidateObjectMeta,
		// NameIsDNSSubdomain).
		if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
			t.Errorf("class %q passes ValidName, but its lease %q is no valid Lease name: %v", name, id, errs)
		}
	}
	for _, name := range []string{"blue", "blue.eu-1", "a", "0.1"} {
		if err := ValidName(name); err != nil {
			t.Errorf("class %q refused: %v", name, err)
		}
	}
}

// TestTheCRDsAdmitTheClassNamesValidNameAdmits ties the two rules: an
// object whose className the CRD admits and ValidName refuses could never
// be taken; one ValidName admits and the CRD refuses, never created.
func TestTheCRDsAdmitTheClassNamesValidNameAdmits(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	checked := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			class, ok := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["className"]
			if !ok {
				continue
			}
			checked++
			if class.Pattern != namePattern.String() || class.MaxLength == nil || *class.MaxLength != 63 {
				t.Errorf("%s %s: className pattern %q, max %v; ValidName's %q, 63", crd.Name, v.Name, class.Pattern, class.MaxLength, namePattern)
			}
		}
	}
	if checked != 3 {
		t.Errorf("checked the className of %d CRDs, want 3", checked)
	}
}
