package bundle_test

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
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
	other := testpki.ValidCA("other").PEM()
	// The first certificate with one base64 character replaced by '!'.
	corruptBase64 := other[:30] + "!" + other[31:]
	mismatchedEnd := strings.Replace(other, "-----END CERTIFICATE-----", "-----END X509 CRL-----", 1)
	// A certificate as a YAML folded scalar writes it: one line.
	folded := strings.Join(strings.Fields(other), " ")
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
		// pem.Decode skips what it cannot read before a block it can; each
		// of these would publish the bundle without its first certificate.
		{"prose before a certificate", "trust these:\n" + good, bundle.ReasonUnparseable},
		{"corrupt base64 before a certificate", corruptBase64 + good, bundle.ReasonUnparseable},
		{"mismatched END line before a certificate", mismatchedEnd + good, bundle.ReasonUnparseable},
		{"BEGIN line without END before a certificate", "-----BEGIN CERTIFICATE-----\n" + good, bundle.ReasonUnparseable},
		{"YAML-folded certificate before a certificate", folded + "\n" + good, bundle.ReasonUnparseable},
		{"text between two certificates", good + "--\n" + other, bundle.ReasonUnparseable},
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

// FuzzParsePEM checks that the parser never panics, that every rejection
// names a rule, and that whatever it accepts has the strictness property,
// checked by pemOracle (line by line, without encoding/pem): every
// non-whitespace byte lies in a BEGIN/END block, there are as many BEGIN
// lines as certificates returned, and block i decodes to certificate i.
// Accepted input also round-trips through the renderer. The seed corpus is
// in testdata/fuzz/FuzzParsePEM.
func FuzzParsePEM(f *testing.F) {
	a, b := testpki.ValidCA("a"), testpki.ValidCA("b")
	f.Add([]byte(a.PEM() + b.PEM()))
	f.Add([]byte(a.PEM() + a.KeyPEM()))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4\n\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(""))
	f.Add([]byte("prose\n" + a.PEM()))
	f.Add([]byte(strings.Join(strings.Fields(a.PEM()), " ") + "\n" + b.PEM()))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := bundle.ParsePEM(data)
		if err != nil {
			var be *bundle.Error
			if !errors.As(err, &be) || be.Reason == "" {
				t.Fatalf("error %v is not a *bundle.Error with a reason", err)
			}
			if certs != nil {
				t.Fatalf("rejected input returned %d certificates", len(certs))
			}
			return
		}
		if len(certs) == 0 {
			t.Fatal("accepted input without certificates")
		}
		blocks, problem := pemOracle(data)
		if problem != "" {
			t.Fatalf("accepted input breaks the strictness property: %s", problem)
		}
		if len(blocks) != len(certs) {
			t.Fatalf("accepted %d certificates from %d BEGIN lines", len(certs), len(blocks))
		}
		for i, der := range blocks {
			if !bytes.Equal(der, certs[i].Raw) {
				t.Fatalf("certificate %d is not the content of BEGIN block %d", i+1, i+1)
			}
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

// pemOracle reads data line by line, independently of encoding/pem: outside
// a block only blank lines are allowed; a line starting with "-----BEGIN"
// opens a block, which runs to the next line starting with "-----END" and
// whose other lines are base64. It returns the decoded content of every
// block in order, or what breaks the property.
func pemOracle(data []byte) ([][]byte, string) {
	var (
		blocks [][]byte
		body   []byte
		inside bool
	)
	for n, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !inside && trimmed == "":
		case !inside && strings.HasPrefix(trimmed, "-----BEGIN"):
			inside, body = true, nil
		case !inside:
			return nil, fmt.Sprintf("line %d is outside every block: %q", n+1, line)
		case strings.HasPrefix(trimmed, "-----BEGIN"):
			return nil, fmt.Sprintf("line %d opens a block inside another", n+1)
		case strings.HasPrefix(trimmed, "-----END"):
			der, err := base64.StdEncoding.DecodeString(string(body))
			if err != nil {
				return nil, fmt.Sprintf("block %d ending on line %d is not base64: %v", len(blocks)+1, n+1, err)
			}
			blocks = append(blocks, der)
			inside = false
		default:
			body = append(body, strings.Join(strings.Fields(line), "")...)
		}
	}
	if inside {
		return nil, "a block has no END line"
	}
	return blocks, ""
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
