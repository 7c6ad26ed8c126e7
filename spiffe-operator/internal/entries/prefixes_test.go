package entries

import (
	"math/rand/v2"
	"strings"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// Whatever two prefixes pass validation, and whatever owner tags and keys,
// no entry ID written under one is read as its own by the other: nested
// prefixes, prefixes that are prefixes of each other, a chosen prefix that
// looks like a cluster's derived one, and prefixes ending in segments of
// hex digits of other lengths.
func TestNoEntryIDIsReadAsTheirOwnByTwoValidPrefixes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hexs := func(n int) string {
		const d = "0123456789abcdef"
		var b strings.Builder
		for range n {
			b.WriteByte(d[r.IntN(16)])
		}
		return b.String()
	}
	segs := []string{"a", "b", "team", "prod", "trustplane", "x-y", "_", "0", hexs(8), hexs(11), hexs(13), hexs(20), hexs(32),
		strings.ToUpper(hexs(12)), hexs(12) + "g"}
	var prefixes []string
	seen := map[string]bool{}
	add := func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		if (IDScheme{Prefix: p}).Validate() == nil {
			prefixes = append(prefixes, p)
		}
	}
	add(ClusterPrefix(k8stypes.UID("8e41c2d0-1111-2222-3333-444444444444")))
	add("trustplane.8E41C2D0.")
	add("trustplane.8e41c2d0.eu.")
	for range 400 {
		n := 1 + r.IntN(4)
		var p string
		for range n {
			p += segs[r.IntN(len(segs))] + "."
		}
		add(p)
	}
	// Extend every prefix by one segment too: nested pairs.
	for _, p := range append([]string(nil), prefixes...) {
		for _, s := range segs {
			add(p + s + ".")
		}
	}
	tags := []string{hexs(12), OwnerTag("not-a-uuid"), OwnerTag(k8stypes.UID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))}
	e := sample()
	for _, q := range prefixes {
		for _, tag := range tags {
			id := IDScheme{Prefix: q}.EntryID(tag, e.Key())
			for _, p := range prefixes {
				got, ok := IDScheme{Prefix: p}.Owner(id)
				if ok != (p == q) || (ok && got != tag) {
					t.Fatalf("prefix %q reads %q (written under %q) as owner %q, ours=%v", p, id, q, got, ok)
				}
			}
		}
	}
	if len(prefixes) < 100 {
		t.Fatalf("only %d valid prefixes tried", len(prefixes))
	}
}
