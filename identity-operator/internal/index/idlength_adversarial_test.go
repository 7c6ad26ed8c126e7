package index

// Review of commit 379559d: the 2048-byte limit of a rendered SPIFFE ID
// holds on the index path too (index.SPIFFEID calls idtemplate.Render).

import (
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/idtemplate"
)

func TestAdversarialIndexNeverKeysAnIDOverTheLimit(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	sa := strings.Repeat("s", 63) + "." + strings.Repeat("t", 63) + "." + strings.Repeat("u", 63) + "." + strings.Repeat("v", 61)
	b := &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "b"}}
	b.Spec.ServiceAccountName = sa
	b.Spec.PoolRef.Name = "p"
	b.Spec.IdentityBoundary.Variant = "v"
	b.Spec.SPIFFEIDPathTemplate = "ns/{namespace}/sa/{serviceAccount}" + strings.Repeat("/{serviceAccount}", 20)
	if id, ok := SPIFFEID(td, b); ok {
		t.Fatalf("index.SPIFFEID accepted a %d-byte ID", len(id))
	}
	if keys := Funcs(td)[FieldSPIFFEID](b); keys != nil {
		t.Fatalf("FieldSPIFFEID indexed an ID over the limit: %v", keys)
	}
	// Exactly at the limit is accepted, one byte more is not.
	prefix := "spiffe://example.org/ns/a/sa/" + sa + "/"
	for _, extra := range []int{0, 1} {
		pad := strings.Repeat("x", idtemplate.MaxIDLength-len(prefix)+extra)
		b.Spec.SPIFFEIDPathTemplate = "ns/{namespace}/sa/{serviceAccount}/" + pad
		id, ok := SPIFFEID(td, b)
		if ok != (extra == 0) {
			t.Fatalf("ID of %d bytes: ok = %v", len(prefix)+len(pad), ok)
		}
		if ok && len(id) != idtemplate.MaxIDLength {
			t.Fatalf("len %d", len(id))
		}
	}
}
