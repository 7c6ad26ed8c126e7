package spifferegistration

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	k8stypes "k8s.io/apimachinery/pkg/types"

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

// TestTheKeptEntriesRecordedAreCappedFairly: only failing workloads with
// a last good entry are recorded, ordered by kind, namespace and name; at
// most maxKeptPerNamespace of one namespace and maxKeptEntries in all;
// and records the status held before stay ahead of new ones, so that no
// namespace's new failing workloads displace another's.
func TestTheKeptEntriesRecordedAreCappedFairly(t *testing.T) {
	m := &policyRenders{byWorkload: map[workloadKey]*rendered{}}
	e := sampleKept("")
	failure := &v1alpha1.Failure{Reason: ReasonInvalidSpiffeIDTemplate}
	add := func(kind v1alpha1.WorkloadKind, ns, name string) workloadKey {
		k := workloadKey{kind: kind, namespace: ns, name: name}
		m.byWorkload[k] = &rendered{failure: failure, lastGood: &e, uid: k8stypes.UID("uid-" + ns + "-" + name)}
		return k
	}
	for n := range 15 {
		for i := range maxKeptPerNamespace + 2 {
			add(v1alpha1.WorkloadKindDaemonSet, fmt.Sprintf("ns-%02d", n), fmt.Sprintf("w-%02d", i))
		}
	}
	m.byWorkload[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "renders"}] = &rendered{entry: e, uid: "uid"}
	m.byWorkload[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "never-rendered"}] = &rendered{failure: failure, uid: "uid"}
	got := m.keptEntries(maps.Keys(m.byWorkload), nil)
	perNamespace := map[string]int{}
	for _, r := range got {
		perNamespace[r.Namespace]++
	}
	if len(got) != maxKeptEntries || len(perNamespace) != maxKeptEntries/maxKeptPerNamespace || perNamespace["ns-00"] != maxKeptPerNamespace ||
		got[0].Name != "w-00" || got[len(got)-1].Namespace != "ns-09" || !slices.IsSortedFunc(got, func(a, b v1alpha1.KeptEntry) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	}) {
		t.Errorf("recorded %d in namespaces %v, from %s/%s to %s/%s; want %d, %d per namespace from ns-00/w-00 to ns-09, in order",
			len(got), perNamespace, got[0].Namespace, got[0].Name, got[len(got)-1].Namespace, got[len(got)-1].Name,
			maxKeptEntries, maxKeptPerNamespace)
	}

	// A workload of namespace z recorded before stays, ahead of those that
	// sort first; one re-created under its name (another UID) does not.
	prev := []v1alpha1.KeptEntry{keptEntryOf(add(v1alpha1.WorkloadKindDeployment, "z", "web"), "uid-z-web", &e),
		{Kind: v1alpha1.WorkloadKindDeployment, Namespace: "zz", Name: "web", UID: "uid-before"}}
	add(v1alpha1.WorkloadKindDeployment, "zz", "web")
	got = m.keptEntries(maps.Keys(m.byWorkload), prev)
	has := func(ns string) bool {
		return slices.ContainsFunc(got, func(r v1alpha1.KeptEntry) bool { return r.Namespace == ns })
	}
	if len(got) != maxKeptEntries || !has("z") || has("zz") {
		t.Errorf("with z/web recorded before: %d records, z/web kept %t, zz/web (re-created) kept %t; want z/web alone kept of the two",
			len(got), has("z"), has("zz"))
	}
}

// TestAKeptEntryTooLargeToRecordIsLeftOut: a workload whose last good
// entry carries more text than maxKeptRecordBytes (matchLabels its editor
// chose, as pod-label selectors) is not recorded, so that no namespace can
// grow the policy's status past what the API server stores; the others
// are.
func TestAKeptEntryTooLargeToRecordIsLeftOut(t *testing.T) {
	m := &policyRenders{byWorkload: map[workloadKey]*rendered{}}
	failure := &v1alpha1.Failure{Reason: ReasonInvalidSpiffeIDTemplate}
	small := sampleKept("")
	large := sampleKept("")
	for i := range 40 {
		large.Selectors = append(large.Selectors, entries.Selector{Type: "k8s", Value: fmt.Sprintf("pod-label:k%02d:%s", i, strings.Repeat("v", 60))})
	}
	large.Normalize()
	m.byWorkload[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "large"}] = &rendered{failure: failure, lastGood: &large, uid: "u1"}
	m.byWorkload[workloadKey{kind: v1alpha1.WorkloadKindDeployment, namespace: "a", name: "small"}] = &rendered{failure: failure, lastGood: &small, uid: "u2"}
	got := m.keptEntries(maps.Keys(m.byWorkload), nil)
	if len(got) != 1 || got[0].Name != "small" || recordBytes(got[0]) > maxKeptRecordBytes {
		t.Errorf("recorded %+v, want the small workload's record alone", got)
	}
}
