package source_test

import (
	"crypto/ecdsa"
	"crypto/x509"

	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

func x509MarshalPKIX(ca testpki.CA) ([]byte, error) {
	return x509.MarshalPKIXPublicKey(&ca.Key.PublicKey)
}

func samePublicKey(pub any, ca testpki.CA) bool {
	k, ok := pub.(*ecdsa.PublicKey)
	return ok && k.Equal(&ca.Key.PublicKey)
}
