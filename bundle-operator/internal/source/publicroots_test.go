package source_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nssroots "golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestPublicRoots proves the publicRoots source: every unconstrained root
// of the pinned NSS set, each a CA, and none of the roots with a
// distrust-after date (a PEM bundle would trust them without it); and that
// the version it reports is the one go.mod pins.
func TestPublicRoots(t *testing.T) {
	unconstrained, constrained := map[string]bool{}, map[string]bool{}
	for r := range nssroots.Roots() {
		if r.Constraint != nil {
			constrained[string(r.Certificate)] = true
		} else {
			unconstrained[string(r.Certificate)] = true
		}
	}
	if len(unconstrained) < 100 || len(constrained) == 0 {
		t.Fatalf("the NSS set has %d unconstrained and %d constrained roots; the test expects both kinds", len(unconstrained), len(constrained))
	}
	res, err := (&source.Resolver{}).Resolve(context.Background(), &v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{PublicRoots: &v1alpha1.PublicRootsSource{}}}})
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if len(res.Certificates) != len(unconstrained) {
		t.Errorf("%d roots, want the %d unconstrained ones", len(res.Certificates), len(unconstrained))
	}
	for _, c := range res.Certificates {
		if constrained[string(c.Raw)] || !unconstrained[string(c.Raw)] {
			t.Errorf("%s is not an unconstrained root of the set", c.Subject)
		}
	}

	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	path, version, _ := strings.Cut(source.PublicRootsVersion, "@")
	if !strings.Contains(string(mod), path+" "+version) {
		t.Errorf("go.mod does not require %s %s: PublicRootsVersion and go.mod disagree", path, version)
	}
}

// TestIsPublicRootKnowsEveryPinnedRootAndNothingElse proves IsPublicRoot
// against the pinned set read here: every root, constrained ones included,
// is one, with the same answer on a second call (the set is built once);
// a CA of the test PKI and a hash one bit off a root's are not.
func TestIsPublicRootKnowsEveryPinnedRootAndNothingElse(t *testing.T) {
	n := 0
	for r := range nssroots.Roots() {
		sum := sha256.Sum256(r.Certificate)
		sha := hex.EncodeToString(sum[:])
		if !source.IsPublicRoot(sha) || !source.IsPublicRoot(sha) {
			t.Errorf("root %s is not a public root", sha)
		}
		sum[0] ^= 1
		if source.IsPublicRoot(hex.EncodeToString(sum[:])) {
			t.Errorf("a hash one bit off root %s is a public root", sha)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("the pinned set has %d roots", n)
	}
	own := sha256.Sum256(testpki.ValidCA("not-public").Cert.Raw)
	if source.IsPublicRoot(hex.EncodeToString(own[:])) {
		t.Error("a test CA is a public root")
	}
}
