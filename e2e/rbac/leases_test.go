// Package rbac_test holds specs of the operators' shipped RBAC against a
// real kube-apiserver: what one operator's credentials may do to what
// another operator owns.
package rbac_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/testenv"
)

// operators are the operators whose roles share the leases' namespace.
var operators = []string{"spiffe-operator", "identity-operator", "bundle-operator"}

// repoRoot returns the repository's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// startPlane starts a control plane whose scheme holds client-go's kinds,
// stopped when the test ends.
func startPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cp
}

// TestAnOperatorManagesOnlyItsOwnLeaderLease runs each operator as its own
// service account with its config/rbac Roles in the namespace all three
// share, as every install does. Each may create, read and renew its own
// leader election lease (named as its process names it), and none may
// read, take or delete another's: a second leader elected on a lease
// another operator deleted could write beside the first.
func TestAnOperatorManagesOnlyItsOwnLeaderLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startPlane(t)
	scheme := cp.Scheme
	const ns = "trustplane-system"
	root := repoRoot()
	clients := map[string]client.Client{}
	for _, op := range operators {
		acc, err := cp.AsServiceAccount(ctx, ns, op, filepath.Join(root, op, "config", "rbac", "role.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.BindRoles(ctx, filepath.Join(root, op, "config", "rbac", "leader_election_role.yaml"), ns, op); err != nil {
			t.Fatal(err)
		}
		if clients[op], err = client.New(acc.Config, client.Options{Scheme: scheme}); err != nil {
			t.Fatal(err)
		}
	}
	leaseOf := func(op string) leaseName {
		return leaseName{ns: ns, name: manager.Options{}.ManagerOptions(manager.InstanceName(op, "")).LeaderElectionID}
	}
	for _, op := range operators {
		c, own := clients[op], leaseOf(op)
		holder, seconds := op+"-0", int32(15)
		now := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: own.name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}}
		if err := c.Create(ctx, lease); err != nil {
			t.Fatalf("%s cannot create its lease %s: %v", op, own.name, err)
		}
		got := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(lease), got); err != nil {
			t.Fatalf("%s cannot read its lease: %v", op, err)
		}
		renewed := metav1.NewMicroTime(time.Now())
		got.Spec.RenewTime = &renewed
		if err := c.Update(ctx, got); err != nil {
			t.Fatalf("%s cannot renew its lease: %v", op, err)
		}
	}
	for _, op := range operators {
		for _, other := range operators {
			if other == op {
				continue
			}
			c, theirs := clients[op], leaseOf(other)
			key := client.ObjectKey{Namespace: theirs.ns, Name: theirs.name}
			got := &coordinationv1.Lease{}
			if err := c.Get(ctx, key, got); !apierrors.IsForbidden(err) {
				t.Errorf("%s reads %s's lease: %v, want Forbidden", op, other, err)
			}
			taken := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: theirs.ns, Name: theirs.name}}
			attacker := op + "-0"
			taken.Spec.HolderIdentity = &attacker
			if err := c.Update(ctx, taken); !apierrors.IsForbidden(err) {
				t.Errorf("%s takes %s's lease: %v, want Forbidden", op, other, err)
			}
			if err := c.Delete(ctx, taken); !apierrors.IsForbidden(err) {
				t.Errorf("%s deletes %s's lease: %v, want Forbidden", op, other, err)
			}
			list := &coordinationv1.LeaseList{}
			if err := c.List(ctx, list, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
				t.Errorf("%s lists the namespace's leases: %v, want Forbidden", op, err)
			}
		}
	}
}

// leaseName names a lease.
type leaseName struct{ ns, name string }
