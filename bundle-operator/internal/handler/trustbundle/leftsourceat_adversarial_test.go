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
	r := newRotation(t)
	r.pass()
	r.withOld(false) // rotation: old leaves the sources
	r.pass()
	if !r.publishesOld() {
		t.Fatal("setup: the old CA is not retained right after the rotation")
	}
	oldSHA := bundle.NewCertificate(r.old.Cert).SHA256
	// Ten hours, a pass every 50 minutes, the status rewound before each.
	for range 12 {
		r.now = r.now.Add(50 * time.Minute)
		for j := range r.tb.Status.Certificates {
			if r.tb.Status.Certificates[j].SHA256 == oldSHA {
				at := metav1.NewTime(r.now)
				r.tb.Status.Certificates[j].LeftSourceAt = &at
			}
		}
		r.pass()
	}
	if r.publishesOld() {
		t.Errorf("the old CA left the sources %s ago (grace 1h), yet the targets still hold it: a rewound status.certificates[].leftSourceAt retains it indefinitely",
			r.now.Sub(r.start))
	}
}

// rotation is a TrustBundle whose inline source holds the CAs old and cur,
// or cur alone, with retainRemovedFor 1h, on a handler whose clock the
// test moves (now).
type rotation struct {
	t          *testing.T
	h          *Handler
	applied    func() map[string]map[string]any
	tb         *v1alpha1.TrustBundle
	old, cur   testpki.CA
	start, now time.Time
}

// newRotation returns a rotation whose source holds both CAs.
func newRotation(t *testing.T) *rotation {
	r := &rotation{t: t, start: time.Now()}
	r.now = r.start
	r.old = testpki.NewCA("old", r.start.Add(-time.Hour), r.start.Add(30*24*time.Hour))
	r.cur = testpki.NewCA("current", r.start.Add(-time.Hour), r.start.Add(30*24*time.Hour))
	r.h, r.applied = attackHandler(t)
	r.h.Now = func() time.Time { return r.now }
	r.tb = &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: time.Hour}},
		},
	}
	r.withOld(true)
	return r
}

// withOld puts old in the source beside cur, or takes it out.
func (r *rotation) withOld(in bool) {
	pem := r.cur.PEM()
	if in {
		pem = r.old.PEM() + pem
	}
	r.tb.Spec.Sources = []v1alpha1.Source{{Inline: pem}}
}

// pass runs a pass, which must succeed.
func (r *rotation) pass() {
	r.t.Helper()
	if err := r.h.CreateOrUpdate(context.Background(), r.tb); err != nil {
		r.t.Fatal(err)
	}
}

// publishesOld reports whether team's target holds old.
func (r *rotation) publishesOld() bool {
	s, _ := r.applied()["team"]["ca.crt"].(string)
	return strings.Contains(s, strings.TrimSpace(r.old.PEM()))
}
