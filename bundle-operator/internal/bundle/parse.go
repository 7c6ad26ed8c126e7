package bundle

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Reasons a bundle is rejected; each names a rule a user can act on. They
// double as condition reasons.
const (
	// ReasonEmpty: the input holds no certificate.
	ReasonEmpty = "EmptyBundle"
	// ReasonPrivateKey: the input holds a private key, which must never be
	// distributed.
	ReasonPrivateKey = "PrivateKeyInBundle"
	// ReasonNotCertificate: the input holds a PEM block that is not a CERTIFICATE.
	ReasonNotCertificate = "UnexpectedPEMBlock"
	// ReasonPEMHeaders: a CERTIFICATE block carries PEM headers.
	ReasonPEMHeaders = "PEMHeaders"
	// ReasonUnparseable: a block or text does not parse.
	ReasonUnparseable = "UnparseableBlock"
	// ReasonNoValidCA: no CA in the input is valid now.
	ReasonNoValidCA = "NoValidCA"
)

// Error is a rejected bundle: a Reason constant and a message.
type Error struct {
	// Reason is one of the Reason constants.
	Reason string
	// Message explains what was found and where.
	Message string
	// Err is the parser's error behind Message, when there is one.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return e.Reason + ": " + e.Message }

// Unwrap returns the parser's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// reject builds an Error; a %w verb in format makes its argument the cause.
func reject(reason, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Reason: reason, Message: err.Error(), Err: errors.Unwrap(err)}
}

// ParsePEM parses a PEM bundle under the parsing rules of the package and
// returns its certificates in input order. Any violation rejects the whole
// input: a partial bundle is never returned.
func ParsePEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return nil, reject(ReasonPrivateKey, "block %d is a %s", n, block.Type)
		}
		if block.Type != "CERTIFICATE" {
			return nil, reject(ReasonNotCertificate, "block %d is a %s, want CERTIFICATE", n, block.Type)
		}
		if len(block.Headers) > 0 {
			return nil, reject(ReasonPEMHeaders, "block %d has PEM headers", n)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, reject(ReasonUnparseable, "block %d: %w", n, err)
		}
		certs = append(certs, cert)
	}
	if trailing := bytes.TrimSpace(rest); len(trailing) > 0 {
		// pem.Decode stops at the first thing it cannot read: a truncated or
		// corrupt block, or text that is not PEM at all.
		if bytes.Contains(trailing, []byte("PRIVATE KEY")) {
			return nil, reject(ReasonPrivateKey, "unparseable data after block %d mentions a private key", len(certs))
		}
		return nil, reject(ReasonUnparseable, "%d bytes after block %d are not a PEM block", len(trailing), len(certs))
	}
	if len(certs) == 0 {
		return nil, reject(ReasonEmpty, "no CERTIFICATE block")
	}
	return certs, nil
}

// ParseDER parses DER certificates (as the SPIRE Bundle API returns them).
func ParseDER(ders [][]byte) ([]*x509.Certificate, error) {
	certs := make([]*x509.Certificate, 0, len(ders))
	for i, der := range ders {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, reject(ReasonUnparseable, "certificate %d: %w", i+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, reject(ReasonEmpty, "no X.509 authority")
	}
	return certs, nil
}
