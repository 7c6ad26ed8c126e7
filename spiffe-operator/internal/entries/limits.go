package entries

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

const (
	// MaxIDLength is the longest SPIFFE ID, in bytes, that an entry may
	// carry as its SPIFFE ID or parent ID: the SPIFFE specification's
	// limit (longer IDs should not be issued). SPIRE on PostgreSQL cannot
	// index an ID past about 2690 bytes and answers Internal.
	MaxIDLength = 2048
	// MaxSelectorLength is the longest selector, type:value, in bytes,
	// that an entry may carry: what the SpiffeEntry API allows. SPIRE on
	// PostgreSQL cannot index one past about 2680 bytes.
	MaxSelectorLength = 1024
	// MaxDNSLabelLength is the longest label of a DNS name: SPIRE refuses
	// a longer one.
	MaxDNSLabelLength = 63
	// MaxSelectors is the most selectors an entry may carry: what the
	// SpiffeEntry API allows. Before each create SPIRE looks for an entry
	// with the same selectors in one query with a term per selector, which
	// SQLite refuses past 500 terms with Internal, an answer the operator
	// must otherwise take for SPIRE failing.
	MaxSelectors = 64
)

// CheckSelectorCount returns an error when an entry of n selectors has more
// than MaxSelectors.
func CheckSelectorCount(n int) error {
	if n > MaxSelectors {
		return fmt.Errorf("the entry would carry %d selectors, over the %d an entry may have", n, MaxSelectors)
	}
	return nil
}

// CheckIDLength returns an error when id is longer than MaxIDLength.
func CheckIDLength(id spiffeid.ID) error {
	if n := len(id.String()); n > MaxIDLength {
		return fmt.Errorf("renders a SPIFFE ID of %d bytes, over the %d an ID may have", n, MaxIDLength)
	}
	return nil
}

// CheckDNSLabels returns an error when a label of the DNS name name is
// longer than MaxDNSLabelLength.
func CheckDNSLabels(name string) error {
	for label := range strings.SplitSeq(name, ".") {
		if len(label) > MaxDNSLabelLength {
			return fmt.Errorf("%q has the label %q, over the %d characters a DNS label may have", name, label, MaxDNSLabelLength)
		}
	}
	return nil
}

// CheckSelectorLength returns an error when s is longer than
// MaxSelectorLength.
func CheckSelectorLength(s Selector) error {
	if n := len(s.Type) + 1 + len(s.Value); n > MaxSelectorLength {
		return fmt.Errorf("renders a selector of %d bytes, over the %d a selector may have", n, MaxSelectorLength)
	}
	return nil
}
