package chaos

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"
)

func derFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// parseTarget reads a target's PEM bundle: every block must be a
// certificate of a CA.
func parseTarget(data string) ([]*x509.Certificate, error) {
	rest := []byte(data)
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("block %d is a %s", len(certs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", len(certs)+1, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("block %d (%s) is not a CA", len(certs)+1, c.Subject)
		}
		certs = append(certs, c)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("%d bytes after the last certificate", len(strings.TrimSpace(string(rest))))
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no certificate")
	}
	return certs, nil
}
