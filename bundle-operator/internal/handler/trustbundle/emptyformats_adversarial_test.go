package trustbundle

// Review of commit 379559d: empty key sets, and statusRoom. Unit tests only
// (no API server): go test -run TestAdversarial ./internal/handler/trustbundle/

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAdversarialJWKSOfASpireSourceWithoutJWTAuthoritiesIsNeverEmpty: 379559d
// refuses keys.jwks without a spire source ("a target is never given an
// empty bundle", docs: "never written with an empty key set"), but a spire
// source whose trust domain has no JWT authority left still renders
// {"keys":[]} and the target is written with it: SPIRE answering with no
// JWT authorities, or (options.dropExpired, as in the sample and the quick
// start) every JWT authority SPIRE still lists having expired.
func TestAdversarialJWKSOfASpireSourceWithoutJWTAuthoritiesIsNeverEmpty(t *testing.T) {
	now := time.Now()
	ca := testpki.ValidCA("spire")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	expired := []bundle.JWTAuthority{{KeyID: "old", PublicKey: &key.PublicKey, ExpiresAt: now.Add(-time.Minute)}}
	cases := map[string]*content{
		"SPIRE lists no JWT authority":                   spireContent("example.org", []*x509.Certificate{ca.Cert}, nil),
		"dropExpired drops every JWT authority of SPIRE": spireContent("example.org", []*x509.Certificate{ca.Cert}, expired).dropExpired(now),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFormats(c)
			data, err := f.data(v1alpha1.Keys{PEM: "ca.crt", JWKS: "jwks.json"})
			if err == nil && string(data["jwks.json"]) == `{"keys":[]}` {
				t.Fatalf("the target is written with jwks.json = %s: an empty key set", data["jwks.json"])
			}
		})
	}
}

// TestAdversarialNoEmptyPEMOrTrustStoreFromAValidSource (soundness): a source
// passes Resolve only with a CA valid now (RequireValidCA), and dropExpired
// uses the same now, so the PEM, PKCS#12 and JKS formats are never of an
// empty bundle on the CreateOrUpdate path; lastGood likewise requires a
// valid CA. Shown here for the renderers on a bundle of one valid CA plus
// expired ones.
func TestAdversarialNoEmptyPEMOrTrustStoreFromAValidSource(t *testing.T) {
	now := time.Now()
	c := &content{all: bundle.New([]*x509.Certificate{testpki.ValidCA("v").Cert, testpki.ExpiredCA("x").Cert}, nil)}
	f := newFormats(c.dropExpired(now))
	data, err := f.data(v1alpha1.Keys{PEM: "ca.crt", PKCS12: "ts.p12", JKS: "ts.jks"})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if len(v) == 0 {
			t.Errorf("%s is empty", k)
		}
	}
	if err := bundle.RequireValidCA(nil, now); err == nil {
		t.Fatal("RequireValidCA(nil) accepted an empty source")
	}
}

// reviewInline returns PEM of about size bytes of distinct valid CAs.
func reviewInline(size int) (string, []*x509.Certificate) {
	var b strings.Builder
	var certs []*x509.Certificate
	for b.Len() < size {
		ca := testpki.ValidCA("inline")
		b.WriteString(ca.PEM())
		certs = append(certs, ca.Cert)
	}
	return b.String(), certs
}

// TestAdversarialStatusRoomKeepsTheWholeObjectUnderEtcdsLimit (soundness): with
// an inline source of 700 KiB (the case of statusroom_test.go), the record
// fitStatus keeps, together with realistic metadata (managed fields of two
// managers, a finalizer, labels) and the status fields outside the record
// (four conditions with 1 KiB messages, five failed targets), serialises
// under etcd's 1.5 MiB; a small spec keeps the full 1 MiB room, so PEM is
// not stripped needlessly.
func TestAdversarialStatusRoomKeepsTheWholeObjectUnderEtcdsLimit(t *testing.T) {
	small := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "tb"}}
	small.Spec.Sources = []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}
	if room, err := statusRoom(small); err != nil || room != maxStatusSize {
		t.Fatalf("statusRoom(small spec) = %d, %v; want %d", room, err, maxStatusSize)
	}

	pem, certs := reviewInline(700 << 10)
	tb := &v1alpha1.TrustBundle{}
	tb.APIVersion, tb.Kind = "bundle.trustplane.dev/v1alpha1", "TrustBundle"
	tb.Name = "big"
	tb.UID = "0f0e0d0c-0b0a-0908-0706-050403020100"
	tb.ResourceVersion = "123456789"
	tb.Generation = 7
	tb.Labels = map[string]string{"trustplane.dev/environment": "default"}
	tb.Finalizers = []string{"trustplane.dev/finalizer"}
	fields := func(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }
	tb.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "bundle.trustplane.dev/v1alpha1", FieldsType: "FieldsV1",
			FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:trustplane.dev/environment":{}}},"f:spec":{"f:sources":{},"f:target":{"f:configMap":{"f:name":{}}}}}`)},
		{Manager: "bundle-operator", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "bundle.trustplane.dev/v1alpha1", FieldsType: "FieldsV1", Subresource: "status",
			FieldsV1: fields(`{"f:status":{"f:certificates":{},"f:conditions":{},"f:fingerprint":{},"f:formats":{},"f:caCount":{}}}`)},
	}
	tb.Spec.Sources = []v1alpha1.Source{{Inline: pem}}
	tb.Spec.Target.ConfigMap = &v1alpha1.ObjectTarget{Name: "ca"}

	c := &content{all: bundle.New(certs, nil)}
	rec, err := recordFormats(c)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := fitStatus(tb, published(c.all, nil), rec)
	if err != nil {
		t.Fatal(err)
	}
	tb.Status.Certificates, tb.Status.Formats = kept, rec
	tb.Status.Fingerprint = c.all.Fingerprint()
	for _, typ := range []string{"Ready", "Processing", "SourcesValid", "TargetsInSync"} {
		tb.Status.Conditions = append(tb.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: "TargetsFailed",
			Message: strings.Repeat("m", 1024), LastTransitionTime: metav1.Now(), ObservedGeneration: 7})
	}
	for i := range 5 {
		tb.Status.FailedTargets = append(tb.Status.FailedTargets, fmt.Sprintf("ConfigMap ns-%d/ca: %s", i, strings.Repeat("e", 250)))
	}
	raw, err := json.Marshal(tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > etcdRequestLimit {
		t.Fatalf("the whole TrustBundle is %d bytes, over etcd's %d (PEM kept: %v)", len(raw), etcdRequestLimit, kept[0].PEM != "")
	}
	t.Logf("object %d bytes, room %d, PEM kept %v", len(raw), func() int { r, _ := statusRoom(tb); return r }(), kept[0].PEM != "")
}

// TestAdversarialStatusRoomZeroIsARefusalNotAPanic (soundness): a spec of
// several inline sources leaves no room; fitStatus then refuses with
// BundleTooLarge before any write (never a negative room or a panic).
func TestAdversarialStatusRoomZeroIsARefusalNotAPanic(t *testing.T) {
	pem, certs := reviewInline(490 << 10)
	tb := &v1alpha1.TrustBundle{}
	tb.Spec.Sources = []v1alpha1.Source{{Inline: pem}, {Inline: pem}, {Inline: pem}}
	room, err := statusRoom(tb)
	if err != nil || room != 0 {
		t.Fatalf("statusRoom = %d, %v; want 0", room, err)
	}
	c := &content{all: bundle.New(certs[:1], nil)}
	rec, err := recordFormats(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fitStatus(tb, published(c.all, nil), rec); ctrlerrors.Reason(err, "") != ReasonBundleTooLarge {
		t.Fatalf("fitStatus with no room = %v, want %s", err, ReasonBundleTooLarge)
	}
}
