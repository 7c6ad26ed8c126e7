package spifferegistration

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// sampleKept is a last good entry with every field a record holds set.
func sampleKept(parent string) entries.Entry {
	e := entries.Entry{
		SpiffeID: spiffeid.RequireFromString("spiffe://example.org/a/web/pay"),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: "sa:web"},
			{Type: "k8s", Value: "pod-label:app:web"}, {Type: "k8s", Value: "container-name:app"}},
		DNSNames: []string{"web.a.svc"}, X509SVIDTTL: 600, JWTSVIDTTL: 300, Hint: "web",
		Admin: true, Downstream: true, FederatesWith: []string{"one.example"},
	}
	if parent != "" {
		e.ParentID = spiffeid.RequireFromString(parent)
	}
	e.Normalize()
	return e
}

// TestAKeptEntryRecordConvertsBackToTheSameEntry: a record made of an
// entry (under a fixed parent, or with none as per-node parents have)
// converts back to an equal entry.
func TestAKeptEntryRecordConvertsBackToTheSameEntry(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	for _, parent := range []string{"spiffe://example.org/agent", ""} {
		e := sampleKept(parent)
		rec := keptEntryOf(workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "web"}, "uid-web", &e)
		got, err := parseKeptEntries([]v1alpha1.KeptEntry{rec}, td)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := got[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "web"}]
		if !ok || r.uid != "uid-web" || !reflect.DeepEqual(r.entry, e) {
			t.Errorf("parent %q: record %+v converts to %+v, want %+v", parent, rec, r, e)
		}
	}
}

// TestAKeptEntryRecordThatCouldServeAnotherNamespaceIsRefused: a record
// that names an identity of another trust domain, selects pods of another
// namespace than its workload's, or names no workload UID keeps nothing,
// and the error says which record and why; the valid records still count.
func TestAKeptEntryRecordThatCouldServeAnotherNamespaceIsRefused(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	e := sampleKept("spiffe://example.org/agent")
	good := keptEntryOf(workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "web"}, "uid-web", &e)
	for name, tc := range map[string]struct {
		mut  func(*v1alpha1.KeptEntry)
		want string
	}{
		"another trust domain":        {func(r *v1alpha1.KeptEntry) { r.SpiffeID = "spiffe://other.org/a/web" }, "not in trust domain example.org"},
		"another namespace's pods":    {func(r *v1alpha1.KeptEntry) { r.Namespace = "b" }, `namespace "b"`},
		"no namespace selector":       {func(r *v1alpha1.KeptEntry) { r.Selectors = []string{"k8s:sa:web"} }, "do not select pods"},
		"a selector of no form":       {func(r *v1alpha1.KeptEntry) { r.Selectors = append(r.Selectors, "nocolon") }, "type:value"},
		"no workload UID":             {func(r *v1alpha1.KeptEntry) { r.UID = "" }, "no workload UID"},
		"a SPIFFE ID that is not one": {func(r *v1alpha1.KeptEntry) { r.SpiffeID = "web" }, "spiffeID"},
		"a parent ID that is not one": {func(r *v1alpha1.KeptEntry) { r.ParentID = "agent" }, "parentID"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := good
			bad.Selectors = append([]string(nil), good.Selectors...)
			bad.Name = "bad"
			tc.mut(&bad)
			got, err := parseKeptEntries([]v1alpha1.KeptEntry{good, bad}, td)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/bad") {
				t.Errorf("error %v, want one naming the record and %q", err, tc.want)
			}
			if len(got) != 1 {
				t.Errorf("records kept: %v, want the valid one alone", got)
			}
		})
	}
}

// TestTheKeptEntriesRecordedAreCappedInTheirOrder: only failing workloads
// with a last good entry are recorded, ordered by kind, namespace and name,
// and at most maxKeptEntries of them.
func TestTheKeptEntriesRecordedAreCappedInTheirOrder(t *testing.T) {
	m := &policyRenders{byWorkload: map[workloadKey]*rendered{}}
	e := sampleKept("")
	failure := &v1alpha1.Failure{Reason: ReasonInvalidSpiffeIDTemplate}
	for i := range maxKeptEntries + 10 {
		k := workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: fmt.Sprintf("w-%03d", i)}
		m.byWorkload[k] = &rendered{failure: failure, lastGood: &e, uid: "uid"}
	}
	m.byWorkload[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "aa-renders"}] = &rendered{entry: e, uid: "uid"}
	m.byWorkload[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "aa-never-rendered"}] = &rendered{failure: failure, uid: "uid"}
	got := m.keptEntries(maps.Keys(m.byWorkload))
	if len(got) != maxKeptEntries || got[0].Name != "w-000" || got[maxKeptEntries-1].Name != fmt.Sprintf("w-%03d", maxKeptEntries-1) {
		t.Errorf("recorded %d, first %s, last %s; want %d from w-000 in order", len(got), got[0].Name, got[len(got)-1].Name, maxKeptEntries)
	}
}
