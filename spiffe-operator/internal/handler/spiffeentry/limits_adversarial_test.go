package spiffeentry

import (
	"strings"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAdversarialASpiffeEntryOverSPIREsLimitsIsRefusedBeforeSPIRE: a
// SpiffeEntry is held to the limits of rendered entries too (a SPIFFE ID
// or parent ID of at most 2048 bytes, selectors of at most 1024, DNS
// labels of at most 63 characters), not only by its CRD: an object stored
// under an older or edited CRD is not held to the CRD's caps, and the
// CRD's DNS pattern admits a 64-character label, which SPIRE refuses.
// build() refuses each with a field error naming the field.
func TestAdversarialASpiffeEntryOverSPIREsLimitsIsRefusedBeforeSPIRE(t *testing.T) {
	for name, mut := range map[string]func(*specT){
		"a SPIFFE ID over 2048 bytes": func(s *specT) { s.SpiffeID = "spiffe://example.org/vm/" + strings.Repeat("a", 2100) },
		"a parent ID over 2048 bytes": func(s *specT) { s.ParentID = "spiffe://example.org/agent/" + strings.Repeat("a", 2100) },
		"a selector over 1024 bytes":  func(s *specT) { s.Selectors = []string{"x509pop:subject:cn:" + strings.Repeat("a", 1100)} },
		"a DNS label over 63 characters": func(s *specT) {
			s.DNSNames = []string{strings.Repeat("a", 64) + ".example.com"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			obj := newEntry("a", 0)
			mut(&obj.Spec)
			if _, fe := build(&obj.Spec, "example.org"); fe == nil {
				t.Errorf("build() accepted %s: it would reach SPIRE", name)
			}
		})
	}
}

type specT = v1alpha1.SpiffeEntrySpec
