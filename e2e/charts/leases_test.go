package charts_test

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/common/manager"
)

// TestLeaderElectionRoleNamesTheReleasesOwnLease proves the leader election
// Role the chart renders lets each operator renew only the lease its
// process elects on, as the process names it (common/manager), for the
// only instance and for a class of spiffe-operator, whose name is the
// class, or a hash of it where the class makes no valid lease name.
func TestLeaderElectionRoleNamesTheReleasesOwnLease(t *testing.T) {
	for _, class := range []string{"", "green", "a..b", strings.Repeat("x", 250)} {
		var sets []string
		if class != "" {
			sets = append(sets, "spiffeOperator.flags.className="+class)
		}
		r := mustTemplate(t, "tp", nil, sets...)
		for _, op := range []string{"spiffe-operator", "identity-operator", "bundle-operator"} {
			instance := ""
			if op == "spiffe-operator" {
				instance = class
			}
			want := manager.Options{}.ManagerOptions(manager.InstanceName(op, instance)).LeaderElectionID
			u := r.objectIn(t, "Role", "tp", op+"-leader-election")
			role := &rbacv1.Role{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role); err != nil {
				t.Fatal(err)
			}
			named := 0
			for _, rule := range role.Rules {
				if !slices.Contains(rule.Resources, "leases") {
					continue
				}
				if len(rule.ResourceNames) > 0 {
					named++
					if !slices.Equal(rule.ResourceNames, []string{want}) {
						t.Errorf("class %q: %s's Role names the lease %v, its process elects on %s", class, op, rule.ResourceNames, want)
					}
					continue
				}
				if !slices.Equal(rule.Verbs, []string{"create"}) {
					t.Errorf("class %q: %s's Role grants %v on every lease; only create may go unnamed", class, op, rule.Verbs)
				}
			}
			if named != 1 {
				t.Errorf("class %q: %s's Role has %d rules naming its lease, want 1", class, op, named)
			}
		}
	}
}
