package trustbundle

import (
	"crypto/x509"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestRetainKeepsRemovedCAsForTheGracePeriod proves the grace rule: a CA
// that left the sources stays until the grace period since it was first
// missed has passed, and no longer.
func TestRetainKeepsRemovedCAsForTheGracePeriod(t *testing.T) {
	now := time.Now()
	oldCA, newCA := testpki.ValidCA("old"), testpki.ValidCA("new")
	both := bundle.New([]*x509.Certificate{oldCA.Cert, newCA.Cert}, nil)
	_, published := retain(both, nil, never, time.Hour, false, now)
	current := bundle.New([]*x509.Certificate{newCA.Cert}, nil)

	cases := []struct {
		name      string
		grace     time.Duration
		leftAt    *time.Time
		wantCount int
	}{
		{"no grace period drops at once", 0, nil, 1},
		{"first missed now is kept", time.Hour, nil, 2},
		{"missed within the grace period is kept", time.Hour, ptr(now.Add(-59 * time.Minute)), 2},
		{"missed longer than the grace period is dropped", time.Hour, ptr(now.Add(-61 * time.Minute)), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prev := clonePublished(published)
			if tc.leftAt != nil {
				for i := range prev {
					if prev[i].SHA256 == bundle.NewCertificate(oldCA.Cert).SHA256 {
						lt := metav1.NewTime(*tc.leftAt)
						prev[i].LeftSourceAt = &lt
					}
				}
			}
			got, record := retain(current, prev, never, tc.grace, false, now)
			if got.Len() != tc.wantCount {
				t.Fatalf("retain() kept %d CAs, want %d", got.Len(), tc.wantCount)
			}
			for _, r := range record {
				retained := r.SHA256 == bundle.NewCertificate(oldCA.Cert).SHA256
				if retained != (r.LeftSourceAt != nil) {
					t.Errorf("%s: LeftSourceAt = %v, want set only on the retained CA", r.Subject, r.LeftSourceAt)
				}
				if retained && tc.leftAt != nil && !r.LeftSourceAt.Time.Equal(metav1.NewTime(*tc.leftAt).Time) {
					t.Errorf("LeftSourceAt moved from %s to %s", *tc.leftAt, r.LeftSourceAt.Time)
				}
			}
		})
	}
}

func TestRetainDropsExpiredRetainedCAsWithDropExpired(t *testing.T) {
	now := time.Now()
	expired, fresh := testpki.ExpiredCA("expired"), testpki.ValidCA("fresh")
	_, published := retain(bundle.New([]*x509.Certificate{expired.Cert, fresh.Cert}, nil), nil, never, time.Hour, false, now)
	got, _ := retain(bundle.New([]*x509.Certificate{fresh.Cert}, nil), published, never, time.Hour, true, now)
	if got.Len() != 1 {
		t.Fatalf("retain() kept %d CAs, want the expired one dropped", got.Len())
	}
}

func TestNextDeadline(t *testing.T) {
	left := metav1.NewTime(time.Now())
	tb := &v1alpha1.TrustBundle{}
	tb.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: time.Minute}
	tb.Status.Certificates = []v1alpha1.PublishedCertificate{{SHA256: "a", NotAfter: metav1.NewTime(left.Add(time.Hour))}}
	if d := NextDeadline(tb); !d.IsZero() {
		t.Errorf("NextDeadline() = %s without retained CAs or dropExpired, want zero", d)
	}
	tb.Status.Certificates[0].LeftSourceAt = &left
	if d := NextDeadline(tb); !d.Equal(left.Add(time.Minute)) {
		t.Errorf("NextDeadline() = %s, want the end of the grace period %s", d, left.Add(time.Minute))
	}
}

// never says no certificate came from SPIRE.
func never(string) bool { return false }

func ptr[T any](v T) *T { return &v }

func clonePublished(in []v1alpha1.PublishedCertificate) []v1alpha1.PublishedCertificate {
	out := make([]v1alpha1.PublishedCertificate, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// TestRetainNeverKeepsACAThatLeftSPIRE proves that retention applies to
// ConfigMap, Secret and inline sources only: a CA that was an authority of a
// trust domain read from SPIRE leaves at once (SPIRE keeps a rotated CA
// until it expires, so one that leaves early was revoked), and a status that
// does not record where its CAs came from retains none when the
// TrustBundle has a spire source.
func TestRetainNeverKeepsACAThatLeftSPIRE(t *testing.T) {
	now := time.Now()
	revoked, fromConfigMap, current := testpki.ValidCA("revoked"), testpki.ValidCA("configmap"), testpki.ValidCA("current")
	local := bundle.Domain{TrustDomain: "example.org", Bundle: bundle.New([]*x509.Certificate{revoked.Cert, current.Cert}, nil)}
	before := &content{all: bundle.New([]*x509.Certificate{revoked.Cert, fromConfigMap.Cert, current.Cert}, nil), local: &local}
	rec, err := recordFormats(before)
	if err != nil {
		t.Fatal(err)
	}
	st := &v1alpha1.TrustBundleStatus{Certificates: published(before.all, nil), Formats: rec}
	now2 := bundle.New([]*x509.Certificate{current.Cert}, nil)

	got, _ := retain(now2, st.Certificates, previouslyFromSpire(st, true), time.Hour, false, now)
	if has(got, revoked) || !has(got, fromConfigMap) {
		t.Errorf("retained %v; want the CA that left SPIRE dropped and the one that left the ConfigMap kept", got)
	}

	legacy := st.DeepCopy()
	legacy.Formats = nil
	if got, _ := retain(now2, legacy.Certificates, previouslyFromSpire(legacy, true), time.Hour, false, now); got.Len() != 1 {
		t.Errorf("an unrecorded origin with a spire source retained %d extra CAs, want none", got.Len()-1)
	}
	if got, _ := retain(now2, legacy.Certificates, previouslyFromSpire(legacy, false), time.Hour, false, now); got.Len() != 3 {
		t.Errorf("an unrecorded origin without a spire source kept %d CAs, want all 3", got.Len())
	}
}

func has(b *bundle.Bundle, ca testpki.CA) bool {
	for _, c := range b.X509() {
		if c.Equal(ca.Cert) {
			return true
		}
	}
	return false
}

// TestRetainKeepsNothingWhosePEMIsNotTheCertificateItsHashNames proves that
// a status record whose PEM was swapped for another certificate (one SPIRE
// revoked, say, recorded under a hash SPIRE never had) retains nothing:
// what is retained is decided by the hash, so the PEM must be the
// certificate the hash names.
func TestRetainKeepsNothingWhosePEMIsNotTheCertificateItsHashNames(t *testing.T) {
	now := time.Now()
	kept, revoked, current := testpki.ValidCA("kept"), testpki.ValidCA("revoked"), testpki.ValidCA("current")
	_, published := retain(bundle.New([]*x509.Certificate{kept.Cert}, nil), nil, never, time.Hour, false, now)
	if len(published) != 1 {
		t.Fatalf("published %d records, want 1", len(published))
	}
	swapped := clonePublished(published)
	swapped[0].PEM = revoked.PEM()
	got, _ := retain(bundle.New([]*x509.Certificate{current.Cert}, nil), swapped, never, time.Hour, false, now)
	for _, c := range got.Certificates() {
		if c.SHA256 == bundle.NewCertificate(revoked.Cert).SHA256 {
			t.Fatal("retained the certificate swapped into the record")
		}
	}
	if got.Len() != 1 {
		t.Errorf("kept %d certificates, want only the current one", got.Len())
	}
	intact, _ := retain(bundle.New([]*x509.Certificate{current.Cert}, nil), clonePublished(published), never, time.Hour, false, now)
	if intact.Len() != 2 {
		t.Errorf("an intact record: kept %d certificates, want 2 (the current one and the retained one)", intact.Len())
	}
}

// TestRetainNeverKeepsAPublicRoot proves that a CA marked FromPublicRoots
// is never retained, though the current root set no longer holds it (a
// newer set dropped it), while a CA that left a ConfigMap still is; and
// that markOrigins marks a public root of the current set and keeps an
// earlier mark while the CA stays published.
func TestRetainNeverKeepsAPublicRoot(t *testing.T) {
	now := time.Now()
	dropped, fromConfigMap, current := testpki.ValidCA("dropped from NSS"), testpki.ValidCA("configmap"), testpki.ValidCA("current")
	before := bundle.New([]*x509.Certificate{dropped.Cert, fromConfigMap.Cert, current.Cert}, nil)
	st := &v1alpha1.TrustBundleStatus{Certificates: published(before, nil)}
	sha := func(ca testpki.CA) string { return bundle.NewCertificate(ca.Cert).SHA256 }
	for i := range st.Certificates {
		st.Certificates[i].FromPublicRoots = st.Certificates[i].SHA256 == sha(dropped)
	}
	got, _ := retain(bundle.New([]*x509.Certificate{current.Cert}, nil), st.Certificates, neverRetained(st, false, func(string) bool { return false }), time.Hour, false, now)
	if has(got, dropped) || !has(got, fromConfigMap) {
		t.Errorf("retained %v; want the public root dropped and the ConfigMap's CA kept", got)
	}

	certs := published(before, nil)
	markOrigins(certs, st.Certificates, nil, func(s string) bool { return s == sha(current) })
	for _, c := range certs {
		if want := c.SHA256 == sha(dropped) || c.SHA256 == sha(current); c.FromPublicRoots != want {
			t.Errorf("%s: FromPublicRoots = %v, want %v", c.Subject, c.FromPublicRoots, want)
		}
	}
}
