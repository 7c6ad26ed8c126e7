package main

import (
	"os/exec"
	"strings"
	"testing"
)

const (
	module         = "github.com/trustplane/trustplane/"
	spiffeAPI      = module + "spiffe-operator/api/v1alpha1"
	spiffeOperator = module + "spiffe-operator/"
)

// deps lists the packages pkg depends on, itself included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestSpiffeOperatorIsOnlyAnAPIDependency proves that identity-operator
// takes nothing from spiffe-operator but its API types, and that those pull
// in no other package of the project than common/status: no SPIRE client,
// no controller, no framework.
func TestSpiffeOperatorIsOnlyAnAPIDependency(t *testing.T) {
	for _, p := range deps(t, module+"identity-operator/cmd") {
		if strings.HasPrefix(p, spiffeOperator) && p != spiffeAPI {
			t.Errorf("identity-operator depends on %s; only %s is allowed", p, spiffeAPI)
		}
	}
	for _, p := range deps(t, spiffeAPI) {
		if strings.HasPrefix(p, module) && p != spiffeAPI && p != module+"common/status" {
			t.Errorf("%s pulls in %s", spiffeAPI, p)
		}
		if strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "sigs.k8s.io/controller-runtime/pkg/client") {
			t.Errorf("%s pulls in %s", spiffeAPI, p)
		}
	}
}
