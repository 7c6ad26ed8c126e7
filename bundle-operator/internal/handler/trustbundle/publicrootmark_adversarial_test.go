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

// anUnconstrainedPublicRootPEM returns one root of the pinned set, PEM.
func anUnconstrainedPublicRootPEM(t *testing.T) (string, string) {
	t.Helper()
	for r := range nssroots.Roots() {
		if r.Constraint != nil {
			continue
		}
		c, err := bundle.ParseDER([][]byte{r.Certificate})
		if err != nil {
			continue
		}
		return string(bundle.New(c, nil).PEM()), bundle.NewCertificate(c[0]).SHA256
	}
	t.Fatal("no public root")
	return "", ""
}

// TestAdversarialPublicRootBesideAPrivateCAInOneSourceDoesNotDropThePrivateCA:
// a tenant's (inline / ConfigMap) source holds one public root beside its
// own CA. It rotates to a new CA: the source now holds the new CA only. The
// old private CA must still be retained for retainRemovedFor (completeness:
// peers still present certificates of it), the public root must not be, and
// the private CAs must never carry the public-root mark.
func TestAdversarialPublicRootBesideAPrivateCAInOneSourceDoesNotDropThePrivateCA(t *testing.T) {
	h, applied := attackHandler(t)
	root, rootSHA := anUnconstrainedPublicRootPEM(t)
	oldCA, newCA := testpki.ValidCA("tenant-old"), testpki.ValidCA("tenant-new")
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{Inline: string(oldCA.PEM()) + root}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: time.Hour}},
		},
	}
	ctx := context.Background()
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("pass 1: %v", err)
	}
	oldSHA := bundle.NewCertificate(oldCA.Cert).SHA256
	for _, c := range tb.Status.Certificates {
		if c.SHA256 == oldSHA && c.FromPublicRoots {
			t.Errorf("the tenant's private CA is marked fromPublicRoots")
		}
		if c.SHA256 == rootSHA && !c.FromPublicRoots {
			t.Errorf("the public root supplied by an inline source is not marked")
		}
	}
	tb.Spec.Sources = []v1alpha1.Source{{Inline: string(newCA.PEM())}}
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("pass 2: %v", err)
	}
	pemText, _ := applied()["team"]["ca.crt"].(string)
	if !strings.Contains(pemText, strings.TrimSpace(string(oldCA.PEM()))) {
		t.Errorf("the tenant's old private CA was dropped at once though retainRemovedFor is 1h")
	}
	if strings.Contains(pemText, strings.TrimSpace(root)) {
		t.Errorf("the public root was retained")
	}
	for _, c := range tb.Status.Certificates {
		if c.SHA256 == oldSHA && c.FromPublicRoots {
			t.Errorf("the retained private CA is marked fromPublicRoots")
		}
	}
	// Pass 3: the status marks cannot spread to the private CA on a later pass.
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatalf("pass 3: %v", err)
	}
	if pemText, _ := applied()["team"]["ca.crt"].(string); !strings.Contains(pemText, strings.TrimSpace(string(oldCA.PEM()))) {
		t.Errorf("pass 3 dropped the retained private CA")
	}
}

// TestAdversarialNeverRetainedMarksOnlyTheHashesItNames: a mark on one record
// never makes another record unretainable, and a status with no marks and
// no SPIRE source retains a private CA.
func TestAdversarialNeverRetainedMarksOnlyTheHashesItNames(t *testing.T) {
	st := &v1alpha1.TrustBundleStatus{Certificates: []v1alpha1.PublishedCertificate{
		{SHA256: "aa", FromPublicRoots: true},
		{SHA256: "bb"},
	}}
	never := neverRetained(st, false, func(s string) bool { return s == "cc" })
	if !never("aa") || !never("cc") {
		t.Errorf("a marked or pinned public root may be retained")
	}
	if never("bb") || never("AA") {
		t.Errorf("an unmarked CA is never retained")
	}
}
