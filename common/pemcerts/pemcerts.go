// Package pemcerts reads PEM bundles of X.509 certificates strictly: a
// bundle parses whole or not at all, with an error that names the rule it
// breaks and where. encoding/pem alone skips what it cannot read, which
// would drop a certificate without a word. Every Trustplane operator that
// reads certificates a user supplies as PEM reads them here.
package pemcerts

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Reasons a PEM bundle is refused; each names a rule a user can act on, and
// doubles as a condition reason.
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
)

// Error is a refused bundle: a Reason and a message.
type Error struct {
	// Reason names the rule broken: one of the Reason constants of this
	// package or of its caller.
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

// Reject builds an Error of reason; a %w verb in format makes its argument
// the cause.
func Reject(reason, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Reason: reason, Message: err.Error(), Err: errors.Unwrap(err)}
}

// Parse parses a PEM bundle of certificates strictly and
// returns its certificates in input order. Any violation rejects the whole
// input: a partial bundle is never returned.
//
// The input must be PEM blocks and whitespace only: every other byte
// belongs to a block, and every "-----BEGIN" line opens a block that
// decodes. encoding/pem alone skips what it cannot read before a block it
// can (prose, bad base64, a missing or mismatched END line, a certificate
// folded onto one line), which would silently drop a certificate.
func Parse(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	pos := skipSpace(data, 0)
	for n := 1; pos < len(data); n++ {
		line := lineOf(data, pos)
		rest := data[pos:]
		if !bytes.HasPrefix(rest, pemBegin) {
			if bytes.Contains(rest, []byte("PRIVATE KEY")) {
				return nil, Reject(ReasonPrivateKey, "text at line %d that is not a PEM block mentions a private key", line)
			}
			return nil, Reject(ReasonUnparseable, "line %d is not part of a PEM block", line)
		}
		block, after := pem.Decode(rest)
		consumed := rest[:len(rest)-len(after)]
		if block == nil || countBeginLines(consumed) != 1 {
			// pem.Decode found no block, or skipped this one (bad base64,
			// no END line or one of another type) to decode a later one.
			if bytes.Contains(firstLine(rest), []byte("PRIVATE KEY")) {
				return nil, Reject(ReasonPrivateKey, "block %d at line %d is a private key that does not decode", n, line)
			}
			return nil, Reject(ReasonUnparseable, "block %d at line %d does not decode: bad base64, or no matching END line", n, line)
		}
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return nil, Reject(ReasonPrivateKey, "block %d is a %s", n, block.Type)
		}
		if block.Type != "CERTIFICATE" {
			return nil, Reject(ReasonNotCertificate, "block %d is a %s, want CERTIFICATE", n, block.Type)
		}
		if len(block.Headers) > 0 {
			return nil, Reject(ReasonPEMHeaders, "block %d has PEM headers", n)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, Reject(ReasonUnparseable, "block %d: %w", n, err)
		}
		certs = append(certs, cert)
		pos = skipSpace(data, len(data)-len(after))
	}
	if len(certs) == 0 {
		return nil, Reject(ReasonEmpty, "no CERTIFICATE block")
	}
	return certs, nil
}

// pemBegin starts the first line of a PEM block.
var pemBegin = []byte("-----BEGIN ")

// skipSpace returns the index of the first non-whitespace byte of data at
// or after i, or len(data).
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// lineOf returns the 1-based line number of byte i of data.
func lineOf(data []byte, i int) int { return 1 + bytes.Count(data[:i], []byte("\n")) }

// firstLine returns data up to its first newline.
func firstLine(data []byte) []byte {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return line
}

// countBeginLines counts the lines of data that start, after leading
// whitespace, with "-----BEGIN".
func countBeginLines(data []byte) int {
	n := 0
	for line := range bytes.Lines(data) {
		if bytes.HasPrefix(bytes.TrimLeft(line, " \t\r\v\f"), pemBegin[:len(pemBegin)-1]) {
			n++
		}
	}
	return n
}
