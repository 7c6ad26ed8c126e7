package trustbundle

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nssroots "golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAdversarialPublicRootsRemovedFromTheSpecAreNotRetained: a TrustBundle
// publishes an inline CA and the public roots, with retainRemovedFor. An
// administrator removes the publicRoots source (the webhooks fed by this
// bundle must no longer trust every public CA). docs/bundle-operator.md:
// retainRemovedFor "keeps a CA that left every ConfigMap, Secret and inline
// source" and, under Rotation, "(which applies to ConfigMap, Secret and
// inline sources only)". A public root was in none of them. Expected: the
// next pass publishes the inline CA alone. A hole: every public root stays
// trusted for the whole grace period.
func TestAdversarialPublicRootsRemovedFromTheSpecAreNotRetained(t *testing.T) {
	h, applied := attackHandler(t)
	own := testpki.ValidCA("own-CA")
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{Inline: own.PEM()}, {PublicRoots: &v1alpha1.PublicRootsSource{}}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: time.Hour}},
		},
	}
	ctx := context.Background()
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("pass 1: %v", err)
	}
	if tb.Status.CACount < 10 {
		t.Fatalf("pass 1 published %d CAs, want the public roots too", tb.Status.CACount)
	}
	tb.Spec.Sources = []v1alpha1.Source{{Inline: own.PEM()}}
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("pass 2: %v", err)
	}
	if tb.Status.CACount != 1 {
		t.Errorf("after the publicRoots source was removed the bundle still holds %d CAs (public roots retained for %s as if they had been ConfigMap/inline CAs)",
			tb.Status.CACount, tb.Spec.Options.RetainRemovedFor.Duration)
	}
	if pemText, _ := applied()["team"]["ca.crt"].(string); strings.Count(pemText, "BEGIN CERTIFICATE") != 1 {
		t.Errorf("target team/ca holds %d certificates, want the inline CA alone", strings.Count(pemText, "BEGIN CERTIFICATE"))
	}
}

// TestAdversarialADistrustedPublicRootIsNotRetained: the operator is upgraded to a
// golang.org/x/crypto/x509roots/fallback version in which NSS set a
// distrust-after date on a root R (or removed it). The previous operator
// published R from the publicRoots source; its status records R like any
// other CA (nothing says where it came from). docs/bundle-operator.md: such
// roots "are left out: published without it they would be trusted for
// certificates NSS no longer accepts". With retainRemovedFor the new
// operator keeps R for the grace period. The status below is exactly what
// the previous operator wrote (built here by a pass whose sources held R).
func TestAdversarialADistrustedPublicRootIsNotRetained(t *testing.T) {
	var constrained string
	for r := range nssroots.Roots() {
		if r.Constraint != nil {
			c, err := bundle.ParseDER([][]byte{r.Certificate})
			if err != nil {
				t.Fatal(err)
			}
			constrained = string(bundle.New(c, nil).PEM())
			break
		}
	}
	if constrained == "" {
		t.Fatal("the pinned root set has no constrained root; this spec needs one")
	}
	h, applied := attackHandler(t)
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			// What the old operator's publicRoots source held: the
			// current set and R, which it did not yet constrain.
			Sources: []v1alpha1.Source{{PublicRoots: &v1alpha1.PublicRootsSource{}}, {Inline: constrained}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: 24 * time.Hour}},
		},
	}
	ctx := context.Background()
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("old operator's pass: %v", err)
	}
	tb.Spec.Sources = []v1alpha1.Source{{PublicRoots: &v1alpha1.PublicRootsSource{}}}
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("upgraded operator's pass: %v", err)
	}
	if pemText, _ := applied()["team"]["ca.crt"].(string); strings.Contains(pemText, constrained) {
		t.Errorf("the root NSS constrained (distrust-after) is still published, retained for %s", tb.Spec.Options.RetainRemovedFor.Duration)
	}
}
