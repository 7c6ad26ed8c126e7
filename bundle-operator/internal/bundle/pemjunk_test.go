package bundle_test

import (
	"strings"
	"testing"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestPEMWithJunkIsRefusedWhole: inputs with junk a lenient reader would skip must be
// refused whole; a refused input never yields a partial bundle.
func TestPEMWithJunkIsRefusedWhole(t *testing.T) {
	good := testpki.ValidCA("good").PEM()
	other := testpki.ValidCA("other").PEM()
	lines := strings.Split(strings.TrimSuffix(other, "\n"), "\n")
	padMid := strings.Join(append(append(append([]string{}, lines[:2]...), "AAA="), lines[2:]...), "\n") + "\n"
	cases := map[string]string{
		"CR-only line ends":                 strings.ReplaceAll(good, "\n", "\r"),
		"padding in the middle of the body": good + padMid,
		"junk line between two blocks":      good + "junk\n" + other,
		"two END lines":                     good + "-----END CERTIFICATE-----\n",
		"END of another type":               strings.Replace(other, "END CERTIFICATE", "END X509 CRL", 1) + good,
		"BEGIN indented inside the body":    strings.Replace(other, "\n", "\n  -----BEGIN CERTIFICATE-----\n", 1) + good,
		"NBSP between blocks":               good + "\u00a0\n" + other,
		"Latin-1 byte between blocks":       good + "\xa0\n" + other,
		"BEGIN line with trailing junk":     strings.Replace(other, "-----BEGIN CERTIFICATE-----", "-----BEGIN CERTIFICATE-----x", 1) + good,
		"blocks glued on one line":          strings.TrimSuffix(good, "\n") + other,
		"TRUSTED CERTIFICATE (OpenSSL aux)": strings.ReplaceAll(other, " CERTIFICATE", " TRUSTED CERTIFICATE"),
		"lowercase type":                    strings.ReplaceAll(other, " CERTIFICATE", " certificate"),
	}
	for name, in := range cases {
		certs, err := bundle.ParsePEM([]byte(in))
		if err == nil {
			t.Errorf("%s: ParsePEM accepted %d certificates, want the input refused", name, len(certs))
		}
	}
	// Whitespace of every kind is only whitespace.
	if _, err := bundle.ParsePEM([]byte("\v\f " + good + "\t\r\n\v" + other + "\f")); err != nil {
		t.Errorf("ParsePEM(blocks separated by whitespace) = %v", err)
	}
}
