package conflict

import (
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/idtemplate"
)

// TestAdversarialNoConflictAcrossNamespacesOrServiceAccounts: an attacker in one
// namespace copies a victim's service account, variant, pool and name and
// tries every template that could make its rendered ID equal the
// victim's. Whatever renders, Classify never reports a conflict between
// members of different namespaces (or service accounts), in either order,
// so no binding of one namespace can make another's report Conflict and
// lose its output.
func TestAdversarialNoConflictAcrossNamespacesOrServiceAccounts(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	templates := []string{"", "ns/{namespace}/sa/{serviceAccount}/x", "ns/victim/sa/db/pool/llm/variant/v1",
		"ns/{namespace}/sa/{serviceAccount}/../../../victim/sa/db/pool/llm/variant/v1",
		"ns/vic{namespace}/sa/{serviceAccount}/pool/{pool}/variant/{variant}",
		"ns/{namespace}-x/sa/{serviceAccount}/pool/{pool}/variant/{variant}",
		"ns/{namespace}/sa/{serviceAccount}/pool/{pool}/variant/{variant}/",
		"ns/{namespace}/sa/{serviceAccount}.x/pool/{pool}/variant/{variant}",
	}
	type who struct{ ns, sa string }
	actors := []who{{"victim", "db"}, {"vic", "db"}, {"victim-x", "db"}, {"tim", "db"}, {"victim", "db.x"}, {"victim", "db-x"}, {"attacker", "db"}}
	var members []Member
	for _, a := range actors {
		for i, tmpl := range templates {
			id, err := idtemplate.Render(td, tmpl, idtemplate.Vars{Namespace: a.ns, ServiceAccount: a.sa, Pool: "llm", Variant: "v1"})
			if err != nil {
				continue
			}
			members = append(members, Member{Namespace: a.ns, Name: "b" + string(rune('a'+i)), ServiceAccount: a.sa, Variant: "v1", SPIFFEID: id})
		}
	}
	for _, x := range members {
		for _, y := range members {
			if x.Namespace == y.Namespace && x.ServiceAccount == y.ServiceAccount {
				continue
			}
			if c := Classify(x, y); c != "" {
				t.Fatalf("%s (%s, %s) and %s (%s, %s) conflict (%s) across namespaces/service accounts", x.Key(), x.ServiceAccount, x.SPIFFEID, y.Key(), y.ServiceAccount, y.SPIFFEID, c)
			}
			if Classify(x, y) != Classify(y, x) {
				t.Fatalf("asymmetric %v %v", x, y)
			}
		}
	}
}

// TestAdversarialFindReasonIsStableUnderPeerOrder: peers fed in any order, with
// duplicates, give the same conflicts and reason, so a binding updated
// rapidly (its peers listed in a different order each pass) cannot flip
// between reasons or drop a conflict.
func TestAdversarialFindReasonIsStableUnderPeerOrder(t *testing.T) {
	self := Member{Namespace: "n", Name: "self", ServiceAccount: "s", Variant: "v", SPIFFEID: "spiffe://example.org/ns/n/sa/s/a"}
	peers := []Member{
		{Namespace: "n", Name: "z", ServiceAccount: "s", Variant: "v", SPIFFEID: "spiffe://example.org/ns/n/sa/s/b"},
		{Namespace: "n", Name: "a", ServiceAccount: "s", Variant: "w", SPIFFEID: "spiffe://example.org/ns/n/sa/s/a"},
		{Namespace: "n", Name: "self", ServiceAccount: "s", Variant: "v", SPIFFEID: "spiffe://example.org/ns/n/sa/s/a"},
		{Namespace: "m", Name: "a", ServiceAccount: "s", Variant: "v", SPIFFEID: "spiffe://example.org/ns/m/sa/s/a"},
	}
	first := Find(self, peers)
	rev := []Member{peers[3], peers[2], peers[1], peers[0], peers[1], peers[0]}
	second := Find(self, rev)
	if len(first) != 2 || len(second) != 2 || first[0] != second[0] || first[1] != second[1] {
		t.Fatalf("order-dependent: %v vs %v", first, second)
	}
	if Reason(first) != v1alpha1.ReasonDuplicateSPIFFEID || Reason(second) != v1alpha1.ReasonDuplicateSPIFFEID {
		t.Fatalf("reason %s / %s", Reason(first), Reason(second))
	}
}
