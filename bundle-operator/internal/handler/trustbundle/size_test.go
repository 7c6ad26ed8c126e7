package trustbundle

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// manyCAs returns n distinct valid CAs.
func manyCAs(n int) []*x509.Certificate {
	out := make([]*x509.Certificate, n)
	for i := range out {
		out[i] = testpki.ValidCA("size").Cert
	}
	return out
}

// TestSizeGuard proves the size rules: a target over Kubernetes' 1 MiB of
// data fails with BundleTooLarge naming the sizes; a status record that
// would not fit drops the certificates' PEM (keeping their fingerprints),
// and a last good bundle is then not rebuilt from it.
func TestSizeGuard(t *testing.T) {
	tb := &v1alpha1.TrustBundle{}
	tb.Spec.Target.ConfigMap = &v1alpha1.ObjectTarget{Name: "ca"}
	tb.Status.Fingerprint = "sha256:last"

	// About 500 bytes of PEM each: 2,400 are over 1 MiB.
	big := &content{all: bundle.New(manyCAs(2400), nil)}
	err := checkSizes(tb, newFormats(big))
	if ctrlerrors.Reason(err, "") != ReasonBundleTooLarge || !strings.Contains(err.Error(), "sha256:last") {
		t.Fatalf("checkSizes() = %v, want %s keeping the last good bundle", err, ReasonBundleTooLarge)
	}

	// Under the data limit, but with subjects and expiries the status
	// record of the PEM does not fit.
	medium := &content{all: bundle.New(manyCAs(1800), nil)}
	if err := checkSizes(tb, newFormats(medium)); err != nil {
		t.Fatalf("checkSizes() of %d bytes = %v", len(medium.all.PEM()), err)
	}
	certs, err := fitStatus(tb, published(medium.all, nil), &v1alpha1.PublishedFormats{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range certs {
		if c.PEM != "" || c.SHA256 == "" {
			t.Fatal("a status record too large with PEM must keep fingerprints without PEM")
		}
	}
	st := &v1alpha1.TrustBundleStatus{Fingerprint: medium.all.Fingerprint(), Certificates: certs}
	if _, err := lastGood(st, time.Now()); !errors.Is(err, errPEMNotRecorded) {
		t.Errorf("lastGood() = %v, want errPEMNotRecorded", err)
	}

	small := &content{all: bundle.New(manyCAs(2), nil)}
	certs, err = fitStatus(tb, published(small.all, nil), &v1alpha1.PublishedFormats{})
	if err != nil || certs[0].PEM == "" {
		t.Errorf("a small status record lost its PEM (%v)", err)
	}
}
