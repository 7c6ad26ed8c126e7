package entries

import (
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
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
	s := IDScheme{Prefix: DefaultIDPrefix}
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
