package entries

import (
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

func sample() Entry {
	e := Entry{
		SpiffeID:  spiffeid.RequireFromString("spiffe://example.org/ns/a/sa/b"),
		ParentID:  spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors: []Selector{{"k8s", "sa:b"}, {"k8s", "ns:a"}, {"k8s", "ns:a"}},
		DNSNames:  []string{"b.a.svc", "a"},
	}
	e.Normalize()
	return e
}

func TestKeyIgnoresSelectorOrderAndOptions(t *testing.T) {
	a, b := sample(), sample()
	b.Selectors = []Selector{{"k8s", "ns:a"}, {"k8s", "sa:b"}}
	b.Normalize()
	b.X509SVIDTTL = 60
	if a.Key() != b.Key() {
		t.Errorf("keys differ: %q vs %q", a.Key(), b.Key())
	}
	b.Selectors = append(b.Selectors, Selector{"k8s", "pod-label:app:x"})
	b.Normalize()
	if a.Key() == b.Key() {
		t.Error("a different selector set has the same key")
	}
}

func TestProtoRoundTripIsEqual(t *testing.T) {
	a := sample()
	back, err := FromProto(a.Proto("x"))
	if err != nil {
		t.Fatal(err)
	}
	if m := UpdateMask(&a, &back); m != nil {
		t.Errorf("round trip differs in %s", MaskString(m))
	}
}

func TestUpdateMaskNamesOnlyChangedFields(t *testing.T) {
	a, b := sample(), sample()
	b.X509SVIDTTL = 600
	b.Hint = "h"
	m := UpdateMask(&a, &b)
	if m == nil || MaskString(m) != "x509SvidTtl,hint" {
		t.Errorf("mask = %v", m)
	}
}

func TestIDSchemeOwnership(t *testing.T) {
	s := IDScheme{Prefix: ClusterPrefix("8e41c2d0-9f3b-4c5d-a6e7-0123456789ab")}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	tag := OwnerTag("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
	if tag != "0f1e2d3c4b5a" {
		t.Errorf("tag = %q", tag)
	}
	e := sample()
	id := s.EntryID(tag, e.Key())
	if got, ok := s.Owner(id); !ok || got != tag {
		t.Errorf("Owner(%q) = %q, %v", id, got, ok)
	}
	if _, ok := s.Owner("5a1b2c3d-manual"); ok {
		t.Error("a foreign entry ID was taken as ours")
	}
	if err := (IDScheme{Prefix: "bad prefix."}).Validate(); err == nil {
		t.Error("prefix with a space accepted")
	}
}

func TestClusterPrefix(t *testing.T) {
	a := IDScheme{Prefix: ClusterPrefix("8e41c2d0-9f3b-4c5d-a6e7-0123456789ab")}
	if a.Prefix != "trustplane.8e41c2d0." {
		t.Fatalf("prefix = %q", a.Prefix)
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	// Another cluster's entries, even of an owner with the same tag, are not ours.
	b := IDScheme{Prefix: ClusterPrefix("77aa0011-0000-4000-8000-000000000000")}
	e := sample()
	theirs := b.EntryID("0f1e2d3c4b5a", e.Key())
	if _, ok := a.Owner(theirs); ok {
		t.Errorf("entry %q of another cluster taken as ours", theirs)
	}
	if tag, ok := b.Owner(theirs); !ok || tag != "0f1e2d3c4b5a" {
		t.Errorf("Owner(%q) = %q, %v", theirs, tag, ok)
	}
}

func TestNestedPrefixesNeverClaimEachOthersEntries(t *testing.T) {
	prefixes := []string{
		"trustplane.", "trustplane.8e41c2d0.", "trustplane.77aa0011.", "team.", "team.prod.", "team.prod.eu.",
		"team.0f1e2d3c4b5a.", "a.",
	}
	e := sample()
	for _, q := range prefixes {
		for _, tag := range []string{"0f1e2d3c4b5a", OwnerTag("not-a-uuid")} {
			id := IDScheme{Prefix: q}.EntryID(tag, e.Key())
			for _, p := range prefixes {
				got, ok := IDScheme{Prefix: p}.Owner(id)
				if want := p == q; ok != want || (ok && got != tag) {
					t.Errorf("prefix %q reads %q (written under %q) as owner %q, %v; want ours=%v", p, id, q, got, ok, want)
				}
			}
		}
	}
}

func TestOwnerRefusesAnythingButTheExactShape(t *testing.T) {
	s := IDScheme{Prefix: "team."}
	for _, id := range []string{
		"team.0f1e2d3c4b5a.0123456789abcdef0123",       // ours
		"team.0f1e2d3c4b5a.0123456789abcdef012",        // hash too short
		"team.0f1e2d3c4b5a.0123456789abcdef01234",      // hash too long
		"team.0F1E2D3C4B5A.0123456789abcdef0123",       // upper case
		"team.prod.0123456789abcdef0123",               // tag not hex
		"team.x.0f1e2d3c4b5a.0123456789abcdef0123",     // nested prefix
		"team.0f1e2d3c4b5a0123456789abcdef01234",       // no dot
		"team.0f1e2d3c4b5a.0123456789abcdef0123.extra", // trailing segment
		"team.0f1e2d3c4b5a.0123456789abcdef0g23",       // not hex
		"5a1b2c3d-manual",                              // hand-made
	} {
		_, ok := s.Owner(id)
		if want := id == "team.0f1e2d3c4b5a.0123456789abcdef0123"; ok != want {
			t.Errorf("Owner(%q) = %v, want %v", id, ok, want)
		}
	}
}

func TestValidateRefusesPrefixesThatStartAnotherInstances(t *testing.T) {
	for p, ok := range map[string]bool{
		"trustplane.":          false, // starts every cluster's default
		"team.0f1e2d3c4b5a.":   false, // ends in an owner tag's shape
		"trustplane.8e41c2d0.": true,
		"team.":                true,
		"team.prod.":           true,
		"team.0f1e2d3c4b5.":    true, // 11 digits: not a tag
		"no-dot":               false,
		"":                     false,
		"sp ace.":              false,
		".":                    false, // empty segments
		".team.":               false,
		"team..":               false,
		"team..prod.":          false,
	} {
		if err := (IDScheme{Prefix: p}).Validate(); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", p, err, ok)
		}
	}
}

func TestOwnerTagAlwaysHasTheParsedShape(t *testing.T) {
	for _, uid := range []k8stypes.UID{"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "a-0000-0000", "", "UPPER-CASE-UID-0000000000"} {
		if tag := OwnerTag(uid); !isHex(tag, tagLen) {
			t.Errorf("OwnerTag(%q) = %q, not %d hex digits", uid, tag, tagLen)
		}
	}
}

// FuzzOwnerParsesOnlyItsOwnPrefix: an ID written under one valid prefix is
// never read as owned under another valid prefix, and always under its own.
func FuzzOwnerParsesOnlyItsOwnPrefix(f *testing.F) {
	f.Add("trustplane.8e41c2d0.", "team.", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
	f.Add("team.", "team.prod.", "x")
	f.Fuzz(func(t *testing.T, a, b, uid string) {
		sa, sb := IDScheme{Prefix: a}, IDScheme{Prefix: b}
		if sa.Validate() != nil || sb.Validate() != nil {
			return
		}
		e := sample()
		tag := OwnerTag(k8stypes.UID(uid))
		id := sb.EntryID(tag, e.Key())
		if got, ok := sb.Owner(id); !ok || got != tag {
			t.Fatalf("%q does not read its own ID %q: %q, %v", b, id, got, ok)
		}
		if _, ok := sa.Owner(id); ok && a != b {
			t.Fatalf("%q reads %q, written under %q, as its own", a, id, b)
		}
	})
}

// TestValidateChosenRefusesOnlyADerivedPrefix: a chosen prefix may not be
// a cluster's derived prefix (it would own that cluster's entries), but may
// nest under one, since strict parsing keeps the two apart.
func TestValidateChosenRefusesOnlyADerivedPrefix(t *testing.T) {
	derived := ClusterPrefix("0badc0de-1111-2222-3333-444455556666")
	for p, ok := range map[string]bool{
		derived:                  false,
		"trustplane.":            false,
		derived + "eu.":          true,
		"trustplane.blue.":       true,
		"trustplane.0badc0d.":    true,
		"team.prod.":             true,
		"team.0f1e2d3c4b5a.":     false,
		"trustplane.0badc0de.x.": true,
	} {
		if err := (IDScheme{Prefix: p}).ValidateChosen(); (err == nil) != ok {
			t.Errorf("ValidateChosen(%q) = %v, want accepted %v", p, err, ok)
		}
	}
	// The oracle of "nests apart": no ID written under the nested prefix
	// parses under the derived one, and the reverse.
	nested := IDScheme{Prefix: derived + "eu."}
	k := Key("k")
	for _, tag := range []string{"0badc0de1111", "657500000000"} {
		if _, mine := (IDScheme{Prefix: derived}).Owner(nested.EntryID(tag, k)); mine {
			t.Errorf("the derived prefix reads an ID of the nested one as its own")
		}
		if _, mine := nested.Owner((IDScheme{Prefix: derived}).EntryID(tag, k)); mine {
			t.Errorf("the nested prefix reads an ID of the derived one as its own")
		}
	}
}
