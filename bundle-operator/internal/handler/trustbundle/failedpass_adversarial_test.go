package trustbundle

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// A pass that fails before it records anything (here a bundle too large
// for a target) leaves the status with the last good bundle, which the
// targets hold. The process remembered the failed pass's bundle as
// published all the same, so once the sources also failed, the status's
// last good bundle was taken for a forged one, and new targets got none.
func TestAPassThatFailsBeforeRecordingLeavesNewTargetsTheLastGoodBundle(t *testing.T) {
	h, applied := attackHandler(t)
	ctx := context.Background()
	good := testpki.ValidCA("good")
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{Inline: good.PEM()}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
		},
	}
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	published, _ := applied()["team"]["ca.crt"].(string)
	if !strings.Contains(published, strings.TrimSpace(good.PEM())) {
		t.Fatalf("first pass published %q, want the good CA", published)
	}

	// About 500 bytes of PEM each: 2,400 CAs are over a ConfigMap's 1 MiB.
	tb.Spec.Sources[0].Inline = string(bundle.New(manyCAs(2400), nil).PEM())
	if err := h.CreateOrUpdate(ctx, tb); ctrlerrors.Reason(err, "") != ReasonBundleTooLarge {
		t.Fatalf("pass with a bundle too large = %v, want %s", err, ReasonBundleTooLarge)
	}

	// The sources fail, and a namespace starts matching (the fake cache
	// holds no target, so "team" is new to the pass).
	tb.Spec.Sources[0].Inline = "not a PEM bundle"
	clear(applied())
	err := h.CreateOrUpdate(ctx, tb)
	if err == nil {
		t.Fatal("a pass whose sources fail returned no error")
	}
	got, _ := applied()["team"]["ca.crt"].(string)
	if got != published {
		t.Errorf("the new target got %q, want the last good bundle the status records; the pass said: %v", got, err)
	}
}
