package chaos

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"
)

// sourceCAs are the versions of the ConfigMap bundle source: every
// certificate a valid version held, and every one only a corrupted
// version held, which no target may ever carry.
type sourceCAs struct {
	mu      sync.Mutex
	current []*x509.Certificate // of the last valid version
	good    map[string]bool     // fingerprints of every valid version's certificates
	bad     map[string]bool     // fingerprints that only corrupted versions held
	serial  int64
}

func newSourceCAs() (*sourceCAs, error) {
	s := &sourceCAs{good: map[string]bool{}, bad: map[string]bool{}}
	ca, err := s.newCert(true)
	if err != nil {
		return nil, err
	}
	s.setValid([]*x509.Certificate{ca})
	return s, nil
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

func (s *sourceCAs) newCert(isCA bool) (*x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	s.serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(s.serial),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("chaos source %d", s.serial)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

func encode(certs []*x509.Certificate) string {
	var b strings.Builder
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.String()
}

func (s *sourceCAs) setValid(certs []*x509.Certificate) {
	s.current = certs
	for _, c := range certs {
		s.good[fingerprint(c)] = true
	}
}

func (s *sourceCAs) valid() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return encode(s.current)
}

// rotate adds a new CA and, at random, drops the oldest.
func (s *sourceCAs) rotate(rnd *mrand.Rand) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ca, err := s.newCert(true)
	if err != nil {
		return "", err
	}
	next := append(append([]*x509.Certificate(nil), s.current...), ca)
	if len(next) > 2 || (len(next) > 1 && rnd.IntN(2) == 0) {
		next = next[1:]
	}
	s.setValid(next)
	return encode(next), nil
}

// corrupt returns a bad version of the source: a new CA with a leaf
// certificate, a truncated certificate, or a new CA with a private key.
func (s *sourceCAs) corrupt(rnd *mrand.Rand) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ca, err := s.newCert(true)
	if err != nil {
		return "", err
	}
	s.bad[fingerprint(ca)] = true
	valid := encode(s.current)
	switch rnd.IntN(3) {
	case 0:
		leaf, err := s.newCert(false)
		if err != nil {
			return "", err
		}
		s.bad[fingerprint(leaf)] = true
		return valid + encode([]*x509.Certificate{ca, leaf}), nil
	case 1:
		full := encode([]*x509.Certificate{ca})
		return valid + full[:len(full)/2], nil
	default:
		return valid + encode([]*x509.Certificate{ca}) + "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY/PuoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n", nil
	}
}

// classify tells, for a certificate in a target, whether a valid source
// version held it, and whether only a corrupted one did.
func (s *sourceCAs) classify(c *x509.Certificate) (good, bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fp := fingerprint(c)
	return s.good[fp], s.bad[fp]
}

// currentSet returns the fingerprints of the last valid version.
func (s *sourceCAs) currentSet() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, c := range s.current {
		out[fingerprint(c)] = true
	}
	return out
}
