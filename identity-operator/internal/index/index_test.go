package index

import (
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

func TestPoolKeyAppliesDefaults(t *testing.T) {
	cases := map[string]v1alpha1.PoolReference{
		"inference.networking.k8s.io/InferencePool/p": {Name: "p"},
		"apps/Deployment/p":                           {Kind: "Deployment", Name: "p"},
		"apps/StatefulSet/p":                          {Group: "apps", Kind: "StatefulSet", Name: "p"},
		"/Job/p":                                      {Kind: "Job", Name: "p"},
	}
	for want, ref := range cases {
		if got := PoolKey(ref); got != want {
			t.Errorf("PoolKey(%+v) = %q, want %q", ref, got, want)
		}
	}
}

func TestKeysSeparateTheirParts(t *testing.T) {
	if GroupKey("a", "b", "c") == GroupKey("a", "bc", "") || GroupKey("a", "b", "c") == GroupKey("a", "b", "d") {
		t.Fatal("GroupKey must not collide on shifted or different parts")
	}
	if len(GroupKey("n", "s", "v")) > 63 || len(IDKey("spiffe://example.org/x")) > 63 {
		t.Fatal("keys must fit a label value")
	}
	if GroupKey("n", "s", "v") == IDKey("n") {
		t.Fatal("group and ID keys must not share a space")
	}
}
