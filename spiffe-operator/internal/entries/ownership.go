package entries

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
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
	if len(t) > clusterTagLen {
		t = t[:clusterTagLen]
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
// in entry IDs and ends with a dot, and refuses a prefix that could claim
// the entries of another instance: DefaultIDPrefix alone (every cluster's
// default prefix starts with it), or a prefix whose last segment has the
// shape of an owner tag (it would start the IDs another instance writes
// under a shorter prefix). IDs are parsed strictly (see Owner), so no entry
// ID ever parses under two different prefixes: these refusals are a margin
// for configuration mistakes, not what keeps instances apart. They do not
// protect an instance that reads IDs loosely (any <prefix><tag>.<rest>) from
// taking the entries of a prefix nested under its own.
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
	if s.Prefix == DefaultIDPrefix {
		return fmt.Errorf("entry ID prefix %q starts the default prefix of every cluster (%s<cluster tag>.); "+
			"leave the prefix unset for the default, or choose one that does not start another instance's", s.Prefix, DefaultIDPrefix)
	}
	segs := strings.Split(strings.TrimSuffix(s.Prefix, "."), ".")
	if slices.Contains(segs, "") {
		return fmt.Errorf("entry ID prefix %q has an empty segment (a leading dot or two dots in a row); use segments like team.prod.", s.Prefix)
	}
	if last := segs[len(segs)-1]; isHex(last, tagLen) {
		return fmt.Errorf("entry ID prefix %q ends in %q, which has the shape of an owner tag, so it starts IDs "+
			"another instance writes under %q; choose another last segment", s.Prefix, last, strings.TrimSuffix(s.Prefix, last+"."))
	}
	return nil
}

// ValidateChosen checks a prefix given by the user rather than derived
// from the cluster: Validate, and not a derived prefix itself
// (DefaultIDPrefix followed by one segment of a cluster tag's shape): an
// instance given another cluster's "trustplane.<cluster tag>." would take
// that cluster's entries as its own, and delete them as orphans. A longer
// prefix under a derived one ("trustplane.<cluster tag>.eu.") is allowed:
// strict parsing keeps it apart from the derived one (see Owner).
func (s IDScheme) ValidateChosen() error {
	if err := s.Validate(); err != nil {
		return err
	}
	rest, under := strings.CutPrefix(s.Prefix, DefaultIDPrefix)
	if seg := strings.TrimSuffix(rest, "."); under && !strings.Contains(seg, ".") && isHex(seg, clusterTagLen) {
		return fmt.Errorf("entry ID prefix %q has the shape of a cluster's derived prefix (%s<cluster tag>.): it would take "+
			"that cluster's entries as its own; leave the prefix unset for this cluster's, or choose another", s.Prefix, DefaultIDPrefix)
	}
	return nil
}

// tagLen and hashLen are the lengths of the owner tag and the key hash in
// entry IDs (hex digits).
const (
	tagLen  = 12
	hashLen = 20
	// clusterTagLen is the length of the cluster tag of ClusterPrefix.
	clusterTagLen = 8
)

// isHex reports whether s is exactly n lower-case hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// OwnerTag is the short form of an owner's UID used in entry IDs: its first
// 12 hex digits. A UID that is not a UUID (Kubernetes only issues UUIDs)
// gets the first 12 hex digits of its SHA-256 instead, so a tag always has
// the shape Owner parses.
func OwnerTag(uid k8stypes.UID) string {
	t := strings.ReplaceAll(string(uid), "-", "")
	if len(t) >= tagLen && isHex(t[:tagLen], tagLen) {
		return t[:tagLen]
	}
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:])[:tagLen]
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
// not created by this operator. The ID must have exactly the shape EntryID
// writes: the prefix, an owner tag of 12 hex digits, a dot and a key hash of
// 20 hex digits, and nothing else. The tag and hash have fixed lengths, so
// the prefix of an ID is determined by the ID alone: an instance whose
// prefix is a prefix of another's (trustplane. and trustplane.8e41c2d0.)
// never takes the other's entries for its own.
func (s IDScheme) Owner(entryID string) (string, bool) {
	rest, ok := strings.CutPrefix(entryID, s.Prefix)
	if !ok || len(rest) != tagLen+1+hashLen || rest[tagLen] != '.' {
		return "", false
	}
	tag, hash := rest[:tagLen], rest[tagLen+1:]
	if !isHex(tag, tagLen) || !isHex(hash, hashLen) {
		return "", false
	}
	return tag, true
}
