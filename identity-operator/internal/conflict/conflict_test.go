package conflict

import (
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// TestClassifyRules proves each pairwise rule, in both orders.
func TestClassifyRules(t *testing.T) {
	a := Member{Namespace: "ns", Name: "a", ServiceAccount: "sa", Variant: "v1", SPIFFEID: "spiffe://td/a"}
	with := func(f func(*Member)) Member { m := a; m.Name = "b"; m.SPIFFEID = "spiffe://td/b"; f(&m); return m }
	cases := []struct {
		name string
		b    Member
		want string
	}{
		{"same SPIFFE ID is DuplicateSPIFFEID", with(func(m *Member) { m.SPIFFEID = a.SPIFFEID; m.Variant = "v2" }), v1alpha1.ReasonDuplicateSPIFFEID},
		{"same SPIFFE ID across namespaces is DuplicateSPIFFEID", with(func(m *Member) { m.SPIFFEID = a.SPIFFEID; m.Namespace = "other" }), v1alpha1.ReasonDuplicateSPIFFEID},
		{"different namespace is no conflict", with(func(m *Member) { m.Namespace = "other" }), ""},
		{"different service account is no conflict", with(func(m *Member) { m.ServiceAccount = "other" }), ""},
		{"different variant is no conflict", with(func(m *Member) { m.Variant = "v2" }), ""},
		{"same namespace, service account and variant is VariantConflict", with(func(*Member) {}), v1alpha1.ReasonVariantConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(a, tc.b); got != tc.want {
				t.Fatalf("Classify(a,b) = %q, want %q", got, tc.want)
			}
			if got := Classify(tc.b, a); got != tc.want {
				t.Fatalf("Classify(b,a) = %q, want %q (rules must be symmetric)", got, tc.want)
			}
		})
	}
}

func TestFindSortsSkipsSelfAndPicksReason(t *testing.T) {
	self := Member{Namespace: "ns", Name: "a", ServiceAccount: "sa", Variant: "v", SPIFFEID: "id-a"}
	peers := []Member{
		{Namespace: "ns", Name: "c", ServiceAccount: "sa", Variant: "v", SPIFFEID: "id-c"},
		self,
		{Namespace: "x", Name: "b", ServiceAccount: "sa", Variant: "w", SPIFFEID: "id-a"},
		{Namespace: "ns", Name: "d", ServiceAccount: "sa", Variant: "w", SPIFFEID: "id-d"},
		{Namespace: "ns", Name: "c", ServiceAccount: "sa", Variant: "v", SPIFFEID: "id-c"},
	}
	got := Find(self, peers)
	if len(got) != 2 || got[0].Peer != "ns/c" || got[1].Peer != "x/b" {
		t.Fatalf("unexpected conflicts %+v", got)
	}
	if Reason(got) != v1alpha1.ReasonDuplicateSPIFFEID {
		t.Fatalf("want DuplicateSPIFFEID to win, got %s", Reason(got))
	}
	if Reason(got[:1]) != v1alpha1.ReasonVariantConflict {
		t.Fatalf("want VariantConflict, got %s", Reason(got[:1]))
	}
}
