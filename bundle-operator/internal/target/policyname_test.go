package target_test

import (
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/bundle-operator/internal/target"
)

// The writer tells the target policy's refusals by its name: a rename of
// the policy alone would turn every refusal that leaves a target in place
// back into a failure that holds up the TrustBundle.
func TestTargetPolicyIsTheShippedPolicysName(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "target_policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.Unmarshal(raw, &policy); err != nil {
		t.Fatal(err)
	}
	if policy.Kind != "ValidatingAdmissionPolicy" || policy.Name != target.TargetPolicy {
		t.Fatalf("config/rbac/target_policy.yaml holds %s %q, the writer knows the policy as %q", policy.Kind, policy.Name, target.TargetPolicy)
	}
}
