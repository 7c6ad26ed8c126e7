package bundle_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestParsePEMRejectsWholeInput proves the parsing rule: one bad block
// rejects the whole input, with a reason naming the rule.
func TestParsePEMRejectsWholeInput(t *testing.T) {
	good := testpki.ValidCA("good").PEM()
	withHeaders := string(pem.EncodeToMemory(&pem.Block{
		Type: "CERTIFICATE", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"},
		Bytes: testpki.ValidCA("h").Cert.Raw,
	}))
	garbageCert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	cases := []struct {
		name   string
		input  string
		reason string
	}{
		{"empty input", "", bundle.ReasonEmpty},
		{"only whitespace", " \n\t\n", bundle.ReasonEmpty},
		{"private key next to a certificate", good + testpki.ValidCA("k").KeyPEM(), bundle.ReasonPrivateKey},
		{"PKCS8 private key", good + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", bundle.ReasonPrivateKey},
		{"other block type", good + string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}})), bundle.ReasonNotCertificate},
		{"PEM headers", good + withHeaders, bundle.ReasonPEMHeaders},
		{"certificate block that does not parse", good + garbageCert, bundle.ReasonUnparseable},
		{"truncated block", good + good[:len(good)/2], bundle.ReasonUnparseable},
		{"text that is not PEM", good + "hello\n", bundle.ReasonUnparseable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			certs, err := bundle.ParsePEM([]byte(tc.input))
			var be *bundle.Error
			if !errors.As(err, &be) {
				t.Fatalf("ParsePEM() error = %v, want a *bundle.Error", err)
			}
			if be.Reason != tc.reason {
				t.Errorf("reason = %q, want %q (%v)", be.Reason, tc.reason, err)
			}
			if certs != nil {
				t.Errorf("ParsePEM() returned %d certificates with an error", len(certs))
			}
		})
	}
}

func TestParsePEMAcceptsCertificatesWithSurroundingWhitespace(t *testing.T) {
	a, b := testpki.ValidCA("a"), testpki.ValidCA("b")
	certs, err := bundle.ParsePEM([]byte("\n" + a.PEM() + "\n\n" + b.PEM() + "\n"))
	if err != nil {
		t.Fatalf("ParsePEM() = %v", err)
	}
	if len(certs) != 2 || !certs[0].Equal(a.Cert) || !certs[1].Equal(b.Cert) {
		t.Fatalf("ParsePEM() = %d certificates, want a and b in input order", len(certs))
	}
}

func TestRequireValidCA(t *testing.T) {
	now := time.Now()
	notYet := testpki.NewCA("future", now.Add(time.Hour), now.Add(48*time.Hour))
	cases := []struct {
		name  string
		cas   []testpki.CA
		valid bool
	}{
		{"one valid CA", []testpki.CA{testpki.ValidCA("v")}, true},
		{"expired and valid", []testpki.CA{testpki.ExpiredCA("e"), testpki.ValidCA("v")}, true},
		{"only expired", []testpki.CA{testpki.ExpiredCA("e1"), testpki.ExpiredCA("e2")}, false},
		{"only not yet valid", []testpki.CA{notYet}, false},
		{"none", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var pemText strings.Builder
			for _, ca := range tc.cas {
				pemText.WriteString(ca.PEM())
			}
			var err error
			if len(tc.cas) == 0 {
				err = bundle.RequireValidCA(nil, now)
			} else {
				certs, perr := bundle.ParsePEM([]byte(pemText.String()))
				if perr != nil {
					t.Fatalf("ParsePEM() = %v", perr)
				}
				err = bundle.RequireValidCA(certs, now)
			}
			if (err == nil) != tc.valid {
				t.Fatalf("RequireValidCA() = %v, want valid=%v", err, tc.valid)
			}
		})
	}
}

// FuzzParsePEM checks that the parser never panics and that whatever it
// accepts round-trips: rendering the accepted certificates and parsing again
// yields the same certificates.
func FuzzParsePEM(f *testing.F) {
	a, b := testpki.ValidCA("a"), testpki.ValidCA("b")
	f.Add([]byte(a.PEM() + b.PEM()))
	f.Add([]byte(a.PEM() + a.KeyPEM()))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4\n\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := bundle.ParsePEM(data)
		if err != nil {
			var be *bundle.Error
			if !errors.As(err, &be) || be.Reason == "" {
				t.Fatalf("error %v is not a *bundle.Error with a reason", err)
			}
			return
		}
		if len(certs) == 0 {
			t.Fatal("accepted input without certificates")
		}
		again, err := bundle.ParsePEM(bundle.New(certs, nil).PEM())
		if err != nil {
			t.Fatalf("rendering of accepted input does not parse: %v", err)
		}
		if got, want := len(again), len(bundle.New(certs, nil).X509()); got != want {
			t.Fatalf("round trip: %d certificates, want %d", got, want)
		}
	})
}

// TestRejectionWrapsTheParserError proves that a block that does not parse
// is rejected with the x509 error as its cause, not only its text.
func TestRejectionWrapsTheParserError(t *testing.T) {
	_, want := x509.ParseCertificate([]byte("not DER"))
	_, err := bundle.ParsePEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	var be *bundle.Error
	if !errors.As(err, &be) || be.Reason != bundle.ReasonUnparseable {
		t.Fatalf("ParsePEM() = %v, want an %s *bundle.Error", err, bundle.ReasonUnparseable)
	}
	cause := errors.Unwrap(be)
	if cause == nil || cause.Error() != want.Error() {
		t.Fatalf("cause = %v, want the x509 error %v", cause, want)
	}
	_, err = bundle.ParseDER([][]byte{[]byte("not DER")})
	if cause := errors.Unwrap(err); cause == nil || cause.Error() != want.Error() {
		t.Fatalf("ParseDER() cause = %v, want the x509 error %v", cause, want)
	}
}
