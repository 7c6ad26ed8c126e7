package trustbundle

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestARewoundLeftSourceAtRetainsNoRemovedCAPastTheGracePeriod: an inline CA is
// rotated out of a TrustBundle with retainRemovedFor: 1h. The operator
// records leftSourceAt on the old CA and retains it for the hour. Whoever
// may write the status (the operator's own token) sets the old CA's
// leftSourceAt to the current time before each pass: a time that has come,
// so retain takes it, and the memory vouches for the CA (this process did
// publish it, as a retained CA, at the previous pass). The memory did not
// remember when the CA left, so the grace period restarted at every patch
// and the removed CA stayed in every target indefinitely; it now holds the
// time to the one it recorded first.
func TestARewoundLeftSourceAtRetainsNoRemovedCAPastTheGracePeriod(t *testing.T) {
	start := time.Now()
	old := testpki.NewCA("old", start.Add(-time.Hour), start.Add(30*24*time.Hour))
	cur := testpki.NewCA("current", start.Add(-time.Hour), start.Add(30*24*time.Hour))
	oldSHA := bundle.NewCertificate(old.Cert).SHA256
	h, applied := attackHandler(t)
	now := start
	h.Now = func() time.Time { return now }
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{Inline: old.PEM()}},
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: time.Hour}},
		},
	}
	ctx := context.Background()
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatal(err)
	}
	tb.Spec.Sources = []v1alpha1.Source{{Inline: cur.PEM()}} // rotation: old leaves the sources
	if err := h.CreateOrUpdate(ctx, tb); err != nil {
		t.Fatal(err)
	}
	published := func() string { s, _ := applied()["team"]["ca.crt"].(string); return s }
	if !strings.Contains(published(), strings.TrimSpace(old.PEM())) {
		t.Fatal("setup: the old CA is not retained right after the rotation")
	}
	// Ten hours, a pass every 50 minutes, the status rewound before each.
	for i := 0; i < 12; i++ {
		now = now.Add(50 * time.Minute)
		for j := range tb.Status.Certificates {
			if tb.Status.Certificates[j].SHA256 == oldSHA {
				at := metav1.NewTime(now)
				tb.Status.Certificates[j].LeftSourceAt = &at
			}
		}
		if err := h.CreateOrUpdate(ctx, tb); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(published(), strings.TrimSpace(old.PEM())) {
		t.Errorf("the old CA left the sources %s ago (grace 1h), yet the targets still hold it: a rewound status.certificates[].leftSourceAt retains it indefinitely",
			now.Sub(start))
	}
}
