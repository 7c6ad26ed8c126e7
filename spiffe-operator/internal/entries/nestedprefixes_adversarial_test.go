package entries

import (
	"strings"
	"testing"
)

// TestAdversarialNoEntryIDParsesUnderTwoInstancesPrefixes: instances whose
// prefixes nest (a class name or cluster name with dots, one prefix a
// prefix of another) never both take one entry ID, whatever the tag and
// hash look like.
func TestAdversarialNoEntryIDParsesUnderTwoInstancesPrefixes(t *testing.T) {
	prefixes := []string{"team.", "team.prod.", "team.prod.eu.", "team-prod.", "trustplane.8e41c2d0.", "trustplane.8e41c2d0.blue.",
		"team.prod.0123456789ab0123456789ab.", "a.", "a.0123456789ab.x."}
	tag, hash := "0123456789ab", strings.Repeat("c", 20)
	var ids []string
	for _, p := range prefixes {
		ids = append(ids, p+tag+"."+hash, p+tag+"."+hash+"."+tag+"."+hash, p+tag+"."+tag+"."+hash)
	}
	for _, id := range ids {
		var owners []string
		for _, p := range prefixes {
			if _, ok := (IDScheme{Prefix: p}).Owner(id); ok {
				owners = append(owners, p)
			}
		}
		if len(owners) > 1 {
			t.Errorf("%q parses under %v", id, owners)
		}
	}
}
