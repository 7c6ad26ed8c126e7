package bundle_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

// dirNameConstrainedCA returns a CA whose (critical, as RFC 5280 4.2.1.10
// requires) name constraints permit one directoryName subtree, O=Example,
// and a leaf it signed inside that subtree. Such CAs are common in
// enterprise and government PKIs; OpenSSL, NSS and Java honour directoryName
// constraints. Go's parser does not handle that name form and lists the
// extension in UnhandledCriticalExtensions.
func dirNameConstrainedCA(t *testing.T) (caPEM, leafPEM []byte) {
	t.Helper()
	rdn, err := asn1.Marshal(pkix.Name{Organization: []string{"Example"}}.ToRDNSequence())
	if err != nil {
		t.Fatal(err)
	}
	dirName := asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: rdn}
	subtree, err := asn1.Marshal(struct{ Base asn1.RawValue }{dirName})
	if err != nil {
		t.Fatal(err)
	}
	permitted := asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: subtree}
	nc, err := asn1.Marshal(struct{ Permitted asn1.RawValue }{permitted})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"Example"}, CommonName: "Example Issuing CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtraExtensions:       []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 30}, Critical: true, Value: nc}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	lkey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ltmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{Organization: []string{"Example"}, CommonName: "server"},
		DNSNames:     []string{"server.example"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	lder, err := x509.CreateCertificate(rand.Reader, ltmpl, ca, &lkey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: lder})
}

// TestACAWithDirectoryNameConstraintsStaysACA: a CA with critical name
// constraints in directoryName form is a CA OpenSSL verifies chains
// through; refusing it as NotACA rejects a whole real-world source that
// was published before.
func TestACAWithDirectoryNameConstraintsStaysACA(t *testing.T) {
	caPEM, leafPEM := dirNameConstrainedCA(t)
	if openssl, err := exec.LookPath("openssl"); err == nil {
		dir := t.TempDir()
		caFile, leafFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "leaf.pem")
		_ = os.WriteFile(caFile, caPEM, 0o600)
		_ = os.WriteFile(leafFile, leafPEM, 0o600)
		out, err := exec.Command(openssl, "verify", "-CAfile", caFile, leafFile).CombinedOutput()
		if err != nil {
			t.Fatalf("openssl verify refuses the chain, so the spec's premise fails: %v\n%s", err, out)
		}
		t.Logf("openssl verify: %s", out)
	}
	certs, err := bundle.ParsePEM(caPEM)
	if err != nil {
		t.Fatalf("ParsePEM() = %v", err)
	}
	// The documented limit: Go's verifier refuses chains through it.
	leaves, err := bundle.ParsePEM(leafPEM)
	if err != nil {
		t.Fatalf("ParsePEM(leaf) = %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(certs[0])
	if _, err := leaves[0].Verify(x509.VerifyOptions{Roots: roots}); !errors.As(err, &x509.UnhandledCriticalExtension{}) {
		t.Errorf("Go's verifier on a chain through it: %v, want UnhandledCriticalExtension (docs/bundle-operator.md states this limit)", err)
	}
	if err := bundle.RequireCAs(certs); err != nil {
		t.Errorf("RequireCAs(a CA with critical directoryName name constraints, which OpenSSL verifies chains through) = %v; the whole source is refused", err)
	}
	if err := bundle.RequireValidCA(certs, time.Now()); err != nil {
		t.Errorf("RequireValidCA() = %v", err)
	}
	if got := bundle.OnlyCAs(certs); len(got) != 1 {
		t.Errorf("OnlyCAs() kept %d certificates, want 1: dropNonCA drops a CA clients use", len(got))
	}
}
