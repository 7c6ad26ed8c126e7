package class

// Attacks class.ValidName together with manager.InstanceName: a class name
// that ValidName (and the CRDs' spec.className pattern) accepts must give
// the instance a leader election lease the API server can store, or an
// instance started with --class-name=<it> and --leader-elect never leads
// (it retries creating an invalid Lease for ever, and its LeaseGuard
// refuses every write).

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane/common/manager"
)

func TestAttackValidClassNameGivesAValidLease(t *testing.T) {
	for _, name := range []string{"blue", "blue.eu-1", "blue..eu", "blue.-eu", "blue-.eu", "a.-b"} {
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
}
