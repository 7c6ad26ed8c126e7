package trustbundle

import (
	"testing"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
)

// TestSecretTargetsAreOptIn proves that without SecretTargets the handler
// never touches Secrets (no Secret kind to sync or release, so the operator
// needs no rights on them), and that a Secret target asked for is reported
// as SecretTargetsDisabled while the ConfigMap target is still handled.
func TestSecretTargetsAreOptIn(t *testing.T) {
	withSecret := &v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}, Secret: &v1alpha1.ObjectTarget{Name: "ca"}}
	off := (&Handler{}).objectTargets(&v1alpha1.Target{})
	if len(off) != 1 || off[0].kind != target.KindConfigMap {
		t.Fatalf("without SecretTargets the kinds are %+v, want the ConfigMap alone", off)
	}
	got := (&Handler{}).objectTargets(withSecret)
	if len(got) != 2 || got[0].disabled != nil || ctrlerrors.Reason(got[1].disabled, "") != ReasonSecretTargetsDisabled {
		t.Fatalf("a Secret target without SecretTargets: %+v, want it disabled with %s and the ConfigMap handled", got, ReasonSecretTargetsDisabled)
	}
	on := (&Handler{SecretTargets: true}).objectTargets(withSecret)
	if len(on) != 2 || on[1].disabled != nil || on[1].spec == nil {
		t.Fatalf("with SecretTargets: %+v, want both kinds handled", on)
	}
}
