package entries

import (
	"fmt"
	"strings"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// DefaultIDPrefix starts the ID of every entry the operator creates; by
// default the cluster's tag follows it (see ClusterPrefix).
const DefaultIDPrefix = "trustplane."

// ClusterPrefix returns the default prefix of the cluster whose kube-system
// namespace has the given UID: "trustplane.<first 8 hex digits>.". Operators
// in different clusters sharing a SPIRE server thus own disjoint entries,
// even when their policies use the same parent ID.
func ClusterPrefix(kubeSystemUID k8stypes.UID) string {
	t := strings.ReplaceAll(string(kubeSystemUID), "-", "")
	if len(t) > 8 {
		t = t[:8]
	}
	return DefaultIDPrefix + t + "."
}

// IDScheme makes and reads the entry IDs that mark the operator's entries:
// <prefix><owner tag>.<key hash>. Workloads never see entry IDs, and the ID
// is deterministic, so a retried create can never make a duplicate.
type IDScheme struct {
	// Prefix starts every ID, e.g. "trustplane.".
	Prefix string
}

// Validate checks that the prefix only uses the characters SPIRE accepts
// in entry IDs and ends with a dot.
func (s IDScheme) Validate() error {
	if s.Prefix == "" || !strings.HasSuffix(s.Prefix, ".") {
		return fmt.Errorf("entry ID prefix %q must be non-empty and end with '.'", s.Prefix)
	}
	for _, r := range s.Prefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("entry ID prefix %q: character %q is not allowed (use [A-Za-z0-9._-])", s.Prefix, r)
		}
	}
	if len(s.Prefix) > 64 {
		return fmt.Errorf("entry ID prefix %q is longer than 64 characters", s.Prefix)
	}
	return nil
}

// OwnerTag is the short form of an owner's UID used in entry IDs.
func OwnerTag(uid k8stypes.UID) string {
	t := strings.ReplaceAll(string(uid), "-", "")
	if len(t) > 12 {
		t = t[:12]
	}
	return t
}

// EntryID returns the ID of the entry with key k owned by the owner with tag.
func (s IDScheme) EntryID(tag string, k Key) string {
	return s.Prefix + tag + "." + k.Hash()
}

// EntryIDFor returns the ID of e owned by the owner with tag, using the
// hash cached in e.
func (s IDScheme) EntryIDFor(tag string, e *Entry) string {
	return s.Prefix + tag + "." + e.KeyHash()
}

// IsEntryIDFor reports whether id is EntryIDFor(tag, e), without building it.
func (s IDScheme) IsEntryIDFor(id, tag string, e *Entry) bool {
	rest, ok := strings.CutPrefix(id, s.Prefix)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, tag)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, ".")
	return ok && rest == e.KeyHash()
}

// Owner returns the owner tag of an entry ID, and false when the entry was
// not created by this operator.
func (s IDScheme) Owner(entryID string) (string, bool) {
	rest, ok := strings.CutPrefix(entryID, s.Prefix)
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, ".")
	return tag, ok && tag != ""
}
