package entries

import (
	"reflect"
	"slices"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// subsets returns every subset of tds, each sorted.
func subsets(tds []string) [][]string {
	var out [][]string
	for mask := range 1 << len(tds) {
		var s []string
		for i, td := range tds {
			if mask&(1<<i) != 0 {
				s = append(s, td)
			}
		}
		out = append(out, s)
	}
	return out
}

// TestWithinKeepsExactlyTheGrantsBothMake checks Within over every
// combination of grants against set intersection: it keeps a grant only
// when the entry has it and the grants make it, never adds one, and
// leaves every other field as it was.
func TestWithinKeepsExactlyTheGrantsBothMake(t *testing.T) {
	tds := []string{"a.example", "b.example", "c.example"}
	bools := []bool{false, true}
	for _, ea := range bools {
		for _, ed := range bools {
			for _, ef := range subsets(tds) {
				e := Entry{
					SpiffeID: spiffeid.RequireFromString("spiffe://example.org/w"), ParentID: spiffeid.RequireFromString("spiffe://example.org/agent"),
					Selectors: []Selector{{Type: "k8s", Value: "ns:a"}}, X509SVIDTTL: 60, DNSNames: []string{"w.example"}, Hint: "h",
					Admin: ea, Downstream: ed, FederatesWith: ef,
				}
				e.Normalize()
				for _, ga := range bools {
					for _, gd := range bools {
						for _, gf := range subsets(tds) {
							got := e.Within(Grants{Admin: ga, Downstream: gd, FederatesWith: gf})
							var both []string
							for _, td := range tds {
								if slices.Contains(ef, td) && slices.Contains(gf, td) {
									both = append(both, td)
								}
							}
							if got.Admin != (ea && ga) || got.Downstream != (ed && gd) || !slices.Equal(got.FederatesWith, both) {
								t.Fatalf("%+v within admin=%t downstream=%t %v = admin=%t downstream=%t %v, want %v",
									e.Grants(), ga, gd, gf, got.Admin, got.Downstream, got.FederatesWith, both)
							}
							rest, want := got, e
							rest.Admin, rest.Downstream, rest.FederatesWith = false, false, nil
							want.Admin, want.Downstream, want.FederatesWith = false, false, nil
							if !reflect.DeepEqual(rest, want) {
								t.Fatalf("Within changed more than the grants: %+v from %+v", got, e)
							}
						}
					}
				}
			}
		}
	}
}
