package source

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"sync"

	nssroots "golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

// PublicRootsVersion is the version of golang.org/x/crypto/x509roots/fallback
// in go.mod, the public root set a publicRoots source holds (a test keeps
// the two equal).
const PublicRootsVersion = "golang.org/x/crypto/x509roots/fallback@v0.0.0-20261030153154-30a33513ff6d"

// publicRoots returns the public (Mozilla NSS) root CAs without those that
// carry a constraint a PEM bundle cannot express (a distrust-after date):
// published without it, such a root would be trusted for certificates the
// NSS store no longer accepts.
func publicRoots() ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for r := range nssroots.Roots() {
		if r.Constraint != nil {
			continue
		}
		c, err := bundle.ParseDER([][]byte{r.Certificate})
		if err != nil {
			return nil, err
		}
		certs = append(certs, c...)
	}
	return certs, nil
}

// IsPublicRoot reports whether sha (the hex SHA-256 of a certificate's DER)
// is a root of the pinned public root set, those with a distrust-after
// constraint included: a CA that is one of them is a public root,
// whichever source supplied it, and is never retained once no source
// supplies it. The set is built once, at the first call.
func IsPublicRoot(sha string) bool { return publicRootSHA256s()[sha] }

// publicRootSHA256s is the set IsPublicRoot reads, computed once from the
// pinned roots and never changed after.
var publicRootSHA256s = sync.OnceValue(func() map[string]bool {
	set := map[string]bool{}
	for r := range nssroots.Roots() {
		sum := sha256.Sum256(r.Certificate)
		set[hex.EncodeToString(sum[:])] = true
	}
	return set
})
