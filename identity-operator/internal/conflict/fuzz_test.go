package conflict

import (
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// FuzzClassifyIsSymmetric checks that both members of a pair always reach
// the same result, and that the result is the one the rules state: the same
// SPIFFE ID is DuplicateSPIFFEID, else the same namespace, service account
// and variant is VariantConflict, else no conflict.
func FuzzClassifyIsSymmetric(f *testing.F) {
	f.Fuzz(func(t *testing.T, ns1, sa1, v1, id1, ns2, sa2, v2, id2 string) {
		a := Member{Namespace: ns1, Name: "a", ServiceAccount: sa1, Variant: v1, SPIFFEID: id1}
		b := Member{Namespace: ns2, Name: "b", ServiceAccount: sa2, Variant: v2, SPIFFEID: id2}
		ab, ba := Classify(a, b), Classify(b, a)
		if ab != ba {
			t.Fatalf("Classify(a, b) = %q but Classify(b, a) = %q", ab, ba)
		}
		want := ""
		switch {
		case id1 == id2:
			want = v1alpha1.ReasonDuplicateSPIFFEID
		case ns1 == ns2 && sa1 == sa2 && v1 == v2:
			want = v1alpha1.ReasonVariantConflict
		}
		if ab != want {
			t.Fatalf("Classify = %q, want %q", ab, want)
		}
		fa, fb := Find(a, []Member{b}), Find(b, []Member{a})
		if (len(fa) == 0) != (want == "") || len(fa) != len(fb) {
			t.Fatalf("Find disagrees: a sees %v, b sees %v", fa, fb)
		}
	})
}
