package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// PKCS12 renders the certificates as a PKCS#12 trust store (each a trusted
// certificate entry, as Java reads it) protected by password, which may be
// empty. The salts and IVs come from a stream derived from the content and
// the password, so the same bundle always renders the same bytes and an
// unchanged bundle writes nothing.
func (b *Bundle) PKCS12(password string) ([]byte, error) {
	enc := pkcs12.Modern
	if password == "" {
		enc = pkcs12.Passwordless
	}
	out, err := enc.WithRand(b.stream("pkcs12", password)).EncodeTrustStore(b.X509(), password)
	if err != nil {
		return nil, fmt.Errorf("encode PKCS#12 trust store: %w", err)
	}
	return out, nil
}

// JKS renders the certificates as a Java KeyStore of trusted certificate
// entries, aliased by SHA-256 and dated by their NotBefore so that the same
// bundle always renders the same bytes, with password (which may be empty)
// protecting its integrity.
func (b *Bundle) JKS(password string) ([]byte, error) {
	ks := keystore.New(keystore.WithOrderedAliases(), keystore.WithMinPasswordLen(0),
		keystore.WithCustomRandomNumberGenerator(b.stream("jks", password)))
	for _, c := range b.certs {
		err := ks.SetTrustedCertificateEntry(c.SHA256, keystore.TrustedCertificateEntry{
			CreationTime: c.X509.NotBefore.UTC(),
			Certificate:  keystore.Certificate{Type: "X509", Content: c.X509.Raw},
		})
		if err != nil {
			return nil, fmt.Errorf("JKS entry %s: %w", c.SHA256, err)
		}
	}
	var out bytes.Buffer
	if err := ks.Store(&out, []byte(password)); err != nil {
		return nil, fmt.Errorf("encode JKS: %w", err)
	}
	return out.Bytes(), nil
}

// stream returns a deterministic byte stream of SHA-256 blocks over the
// format, the password and the bundle: the randomness a store encoder asks
// for. It hides nothing (the content is public), it only makes the output
// reproducible.
func (b *Bundle) stream(format, password string) *hashStream {
	seed := sha256.New()
	fmt.Fprintf(seed, "%s\x00%d:%s\x00", format, len(password), password)
	seed.Write(b.PEM())
	return &hashStream{seed: seed.Sum(nil)}
}

// hashStream yields SHA-256(seed || counter) blocks.
type hashStream struct {
	seed    []byte
	counter uint64
	buf     []byte
}

func (s *hashStream) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(s.buf) == 0 {
			block := sha256.Sum256(binary.BigEndian.AppendUint64(bytes.Clone(s.seed), s.counter))
			s.counter++
			s.buf = block[:]
		}
		c := copy(p[n:], s.buf)
		s.buf = s.buf[c:]
		n += c
	}
	return n, nil
}
