package spifferegistration

import (
	"context"
	"slices"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAFallbackKeepsWhatAPolicyThatNeverCompiledSelects: a fallback
// registers Deployment a/web. A new policy is created whose spec has never
// compiled (a template naming an unknown variable): it is Blocked from its
// first pass and has registered nothing, so it keeps nothing. The fallback
// yielded web to that policy's selectors (compileSelection succeeds) and
// deleted web's only entry (seen failing): a typo in a new policy revoked
// the identity of every workload it selects, which "a bad edit must not
// revoke identities" forbids. A policy whose spec fails now takes
// workloads from the fallback only while its status records a parent it
// holds entries under.
func TestAFallbackKeepsWhatAPolicyThatNeverCompiledSelects(t *testing.T) {
	ctx := context.Background()
	web := map[string]string{"app": "web"}
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "web", web))
	fb := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Fallback = true
		s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
	})
	fb.Name, fb.Generation = "fallback", 1
	if err := e.c.Create(ctx, fb.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/web"}) {
		t.Fatalf("precondition: SPIRE holds %v, want the fallback's entry for web", got)
	}

	// A new policy whose spec never compiled: it never registers anything.
	typo := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAcount}"
	})
	typo.Name, typo.Generation, typo.UID = "typo", 1, k8stypes.UID("33333333-4444-5555-6666-777777777777")
	if err := e.c.Create(ctx, typo.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, typo); err == nil {
		t.Fatal("precondition: the typo policy's spec should not compile")
	}
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, typo); err == nil {
		t.Fatal("precondition: the typo policy's spec should not compile")
	}

	if got := paths(e.api); !slices.Equal(got, []string{"/fallback/ns/a/sa/web"}) {
		t.Errorf("Deployment a/web lost its only identity: the fallback yielded it to policy typo, whose spec never compiled and which registered nothing; SPIRE holds %v (fallback: workloadsSelected=%d)",
			got, fb.Status.WorkloadsSelected)
	}
}
