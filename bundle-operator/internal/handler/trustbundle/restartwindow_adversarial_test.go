package trustbundle

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAStatusForgedAfterTheFirstPassAfterARestartFillsNoNewTarget: the
// documented limit of publishedMemory was that "the first pass of a
// TrustBundle after the process starts ... trusts the status". In fact
// every pass trusted it until one succeeded: while the sources failed
// since the restart, the memory stayed empty and vouchesFor said yes to
// any status; the first pass now adopts the status it reads. Here the first pass after the restart runs on the genuine status
// (sources failing); only then does the status writer add a CA of its own
// (recomputing the fingerprint), and the next pass hands it to new targets.
func TestAStatusForgedAfterTheFirstPassAfterARestartFillsNoNewTarget(t *testing.T) {
	ctx := context.Background()
	legit, rogue := testpki.ValidCA("legit"), testpki.ValidCA("rogue")
	h, _ := attackHandler(t)
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{Inline: legit.PEM()}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
		},
	}
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatal(err)
	}
	// Restart; the source now fails.
	h2, applied := attackHandler(t)
	tb.Spec.Sources = []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: "trusted", Name: "missing", Key: "ca.crt"}}}
	if err := h2.CreateOrUpdate(ctx, tb); err == nil {
		t.Fatal("setup: the source was to fail")
	}
	if got, _ := applied()["team"]["ca.crt"].(string); !strings.Contains(got, strings.TrimSpace(legit.PEM())) {
		t.Fatalf("setup: the first pass after the restart did not fill team/ca with the last good bundle: %q", got)
	}
	// Forge: the status writer adds its CA to the last good bundle.
	forged := bundle.New([]*x509.Certificate{legit.Cert, rogue.Cert}, nil)
	tb.Status.Certificates = published(forged, nil)
	tb.Status.Fingerprint = forged.Fingerprint()
	_ = h2.CreateOrUpdate(ctx, tb) // a new namespace's target is filled
	if got, _ := applied()["team"]["ca.crt"].(string); strings.Contains(got, strings.TrimSpace(rogue.PEM())) {
		t.Errorf("a CA recorded in the status after the first pass since the restart reached a new target: the memory vouches for any status until a pass succeeds")
	}
}
