package conflict

import (
	"sort"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// Member is what the rules look at in a binding.
type Member struct {
	// Namespace of the binding.
	Namespace string
	// Name of the binding.
	Name string
	// ServiceAccount is spec.serviceAccountName.
	ServiceAccount string
	// Variant is spec.identityBoundary.variant.
	Variant string
	// SPIFFEID is the rendered SPIFFE ID.
	SPIFFEID string
}

// Key returns "namespace/name".
func (m Member) Key() string { return m.Namespace + "/" + m.Name }

// Classify applies the rules to a pair and returns the cause, or "" when
// the pair does not conflict. Classify(a, b) == Classify(b, a).
func Classify(a, b Member) string {
	switch {
	case a.SPIFFEID == b.SPIFFEID:
		return v1alpha1.ReasonDuplicateSPIFFEID
	case a.Namespace != b.Namespace || a.ServiceAccount != b.ServiceAccount:
		return ""
	case a.Variant != b.Variant:
		return ""
	default:
		return v1alpha1.ReasonVariantConflict
	}
}

// Find returns self's conflicts with peers, sorted by peer, skipping self
// and duplicate peers.
func Find(self Member, peers []Member) []v1alpha1.Conflict {
	seen := map[string]bool{self.Key(): true}
	var out []v1alpha1.Conflict
	for _, p := range peers {
		if seen[p.Key()] {
			continue
		}
		seen[p.Key()] = true
		if cause := Classify(self, p); cause != "" {
			out = append(out, v1alpha1.Conflict{Peer: p.Key(), Cause: cause, PeerSPIFFEID: p.SPIFFEID, PeerVariant: p.Variant})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

// Reason returns the condition reason for a conflict list: DuplicateSPIFFEID
// when any conflict is one (it is the stronger claim), else VariantConflict.
func Reason(conflicts []v1alpha1.Conflict) string {
	for _, c := range conflicts {
		if c.Cause == v1alpha1.ReasonDuplicateSPIFFEID {
			return v1alpha1.ReasonDuplicateSPIFFEID
		}
	}
	return v1alpha1.ReasonVariantConflict
}
