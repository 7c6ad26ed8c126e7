package trustbundle

import (
	"crypto/x509"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAForgedFutureLeftSourceAtRetainsNoCAPastTheGracePeriod: whoever may
// write a TrustBundle's status records a CA with leftSourceAt far in the
// future. With spec.options.retainRemovedFor set, retain published it and
// recorded the forged time again, so it stayed published long after the
// grace period. The operator only ever records a time that has come; a
// later one counts as now.
func TestAForgedFutureLeftSourceAtRetainsNoCAPastTheGracePeriod(t *testing.T) {
	now := time.Now()
	rogue, current := testpki.ValidCA("rogue"), testpki.ValidCA("current")
	_, forged := retain(bundle.New([]*x509.Certificate{rogue.Cert}, nil), nil, never, time.Hour, false, now)
	future := metav1.NewTime(now.Add(10 * 365 * 24 * time.Hour))
	forged[0].LeftSourceAt = &future
	sources := bundle.New([]*x509.Certificate{current.Cert}, nil)

	_, record := retain(sources, forged, never, time.Hour, false, now)
	later := now.Add(2 * time.Hour) // past any grace period that began by now
	got, _ := retain(sources, record, never, time.Hour, false, later)
	if has(got, rogue) {
		t.Errorf("a CA the status says left the sources at %s (in the future) is still published %s later, past the 1h grace period",
			future.Format(time.RFC3339), later.Sub(now))
	}
}

// TestAForgedRecordRetainsNoCAThisProcessNeverPublished: the same writer
// records a CA no source ever held, with no leftSourceAt, and the next pass
// published it to every target for the grace period (retain cannot tell a
// record the operator wrote from a forged one). The handler now retains
// only CAs this process published for the TrustBundle; the first pass
// after the process starts has nothing to check against and trusts the
// status (a documented limit).
func TestAForgedRecordRetainsNoCAThisProcessNeverPublished(t *testing.T) {
	now := time.Now()
	rogue, current := testpki.ValidCA("rogue"), testpki.ValidCA("current")
	var memory publishedMemory
	uid := types.UID("tb-uid")
	_, published := retain(bundle.New([]*x509.Certificate{current.Cert}, nil), memory.vouched(uid, nil), never, time.Hour, false, now)
	memory.record(uid, published, nil)
	_, rogueRec := retain(bundle.New([]*x509.Certificate{rogue.Cert}, nil), nil, never, time.Hour, false, now)
	forged := append(clonePublished(published), rogueRec...)

	got, _ := retain(bundle.New([]*x509.Certificate{current.Cert}, nil), memory.vouched(uid, forged), never, time.Hour, false, now)
	if has(got, rogue) {
		t.Error("a CA no source ever held, recorded in the status by someone else, is published")
	}
	if !has(got, current) {
		t.Error("the CA the sources hold is not published")
	}

	others := bundle.New([]*x509.Certificate{testpki.ValidCA("next").Cert}, nil)
	got, _ = retain(others, memory.vouched(uid, published), never, time.Hour, false, now)
	if !has(got, current) {
		t.Error("a CA this process published, gone from the sources, is no longer retained")
	}
	memory.forget(uid)
	if got := memory.vouched(uid, forged); len(got) != 0 {
		t.Errorf("a status no first pass adopted vouches for %d certificates", len(got))
	}
	memory.adopt(uid, &v1alpha1.TrustBundleStatus{Certificates: forged})
	if len(memory.vouched(uid, forged)) != len(forged) {
		t.Error("the status the first pass after a start reads is not adopted (a documented limit)")
	}
}

// TestTheLastGoodBundleIsVouchedForOnlyAsPublished: while the sources fail,
// new targets get the last good bundle the status records; the handler
// gives it only when every certificate of it is one this process published
// for the TrustBundle, or adopted from the status at its first pass.
func TestTheLastGoodBundleIsVouchedForOnlyAsPublished(t *testing.T) {
	now := time.Now()
	rogue, current := testpki.ValidCA("rogue"), testpki.ValidCA("current")
	var memory publishedMemory
	uid := types.UID("tb-uid")
	_, published := retain(bundle.New([]*x509.Certificate{current.Cert}, nil), nil, never, 0, false, now)
	_, rogueRec := retain(bundle.New([]*x509.Certificate{rogue.Cert}, nil), nil, never, 0, false, now)
	if memory.vouchesFor(uid, published, nil) {
		t.Error("a status no first pass adopted is vouched for")
	}
	memory.adopt(uid, &v1alpha1.TrustBundleStatus{Certificates: rogueRec})
	if !memory.vouchesFor(uid, rogueRec, nil) {
		t.Error("the status the first pass after a start reads is not adopted (a documented limit)")
	}
	memory.record(uid, published, nil)
	if !memory.vouchesFor(uid, published, nil) {
		t.Error("the bundle this process published is not vouched for")
	}
	if memory.vouchesFor(uid, append(clonePublished(published), rogueRec...), nil) || memory.vouchesFor(uid, rogueRec, nil) {
		t.Error("a status holding a certificate this process never published is vouched for")
	}
}
