package template

import (
	"strings"
	"testing"
)

func TestParseRejectsBadTemplates(t *testing.T) {
	for _, src := range []string{"", "ns/{namespace", "ns/{pod}", "ns/{label:}", "ns/{label:a b}", "ns/$x", "ns/{namespace}?"} {
		if _, err := Parse(src); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", src)
		}
	}
}

func TestRenderDefaultTemplate(t *testing.T) {
	tpl, err := Parse("ns/{namespace}/sa/{serviceAccount}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(Values{Namespace: "prod", ServiceAccount: "checkout", Name: "web", Kind: "Deployment"})
	if err != nil {
		t.Fatal(err)
	}
	if got != "ns/prod/sa/checkout" {
		t.Errorf("Render = %q", got)
	}
	if tpl.PerWorkload() {
		t.Error("service-account template reported as per-workload")
	}
}

func TestPerWorkloadVariables(t *testing.T) {
	for _, src := range []string{"w/{name}", "k/{kind}", "app/{label:app.kubernetes.io/name}"} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if !tpl.PerWorkload() {
			t.Errorf("%q not reported as per-workload", src)
		}
	}
}

func TestRenderFailsOnMissingOrEmptyValue(t *testing.T) {
	tpl, _ := Parse("app/{label:app}/{serviceAccount}")
	if _, err := tpl.Render(Values{ServiceAccount: "sa"}); err == nil || !strings.Contains(err.Error(), "no label") {
		t.Errorf("missing label: err = %v", err)
	}
	if _, err := tpl.Render(Values{Labels: map[string]string{"app": "a"}}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty service account: err = %v", err)
	}
	got, err := tpl.Render(Values{ServiceAccount: "sa", Labels: map[string]string{"app": "a"}})
	if err != nil || got != "app/a/sa" {
		t.Errorf("Render = %q, %v", got, err)
	}
}

func TestParseParentAcceptsOnlyNodeVariablesAndNeedsTheNode(t *testing.T) {
	for _, src := range []string{"agent/{namespace}/{nodeUID}", "agent/{label:app}/{nodeName}", "agent/{clusterName}", "agent/fixed", "{trustDomain}"} {
		if _, err := ParseParent(src); err == nil {
			t.Errorf("ParseParent(%q) succeeded, want an error", src)
		}
	}
	for _, src := range []string{"agent/{nodeName}", "ns/{nodeUID}"} {
		if _, err := Parse(src); err == nil {
			t.Errorf("Parse(%q) accepted a node variable in a workload template", src)
		}
	}
	tpl, err := ParseParent("spire/agent/k8s_psat/{clusterName}/{nodeUID}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(Values{NodeName: "n1", NodeUID: "u-1", ClusterName: "prod", TrustDomain: "example.org"})
	if err != nil || got != "spire/agent/k8s_psat/prod/u-1" {
		t.Errorf("Render = %q, %v", got, err)
	}
	if _, err := tpl.Render(Values{NodeUID: "u-1"}); err == nil || !strings.Contains(err.Error(), "{clusterName}: empty") {
		t.Errorf("empty cluster name: err = %v", err)
	}
}

func TestParsePodRendersPodVariablesAndOnePathSegmentEach(t *testing.T) {
	for _, src := range []string{"w/{name}", "k/{kind}", "n/{nodeUID}", "a/{annotation:}", "a/{annotation:a b}"} {
		if _, err := ParsePod(src); err == nil {
			t.Errorf("ParsePod(%q) succeeded, want an error", src)
		}
	}
	if _, err := Parse("p/{podName}"); err == nil {
		t.Error("Parse accepted a pod variable in a workload template")
	}
	tpl, err := ParsePod("{trustDomain}/{clusterName}/ns/{namespace}/{ownerKind}/{ownerName}/{podName}/{nodeName}/{annotation:example.com/role}/{label:app}")
	if err != nil {
		t.Fatal(err)
	}
	v := Values{Namespace: "a", ServiceAccount: "sa", PodName: "p-1", OwnerKind: "Job", OwnerName: "backup", NodeName: "n1",
		ClusterName: "c", TrustDomain: "td", Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"example.com/role": "reader"}}
	got, err := tpl.Render(v)
	if err != nil || got != "td/c/ns/a/Job/backup/p-1/n1/reader/x" {
		t.Errorf("Render = %q, %v", got, err)
	}
	v.Annotations["example.com/role"] = "reader/../../admin"
	if _, err := tpl.Render(v); err == nil || !strings.Contains(err.Error(), "contains '/'") {
		t.Errorf("annotation with '/': err = %v", err)
	}
	delete(v.Annotations, "example.com/role")
	if _, err := tpl.Render(v); err == nil || !strings.Contains(err.Error(), "no annotation") {
		t.Errorf("missing annotation: err = %v", err)
	}
}

func TestMatchesTellsARenderingOfThisWorkloadFromAnyOther(t *testing.T) {
	tmpl, err := Parse("{namespace}/{name}/{label:team}-x")
	if err != nil {
		t.Fatal(err)
	}
	withTeam := Values{Namespace: "a", Name: "web", Labels: map[string]string{"team": "pay"}}
	noTeam := Values{Namespace: "a", Name: "web"}
	for _, tc := range []struct {
		s    string
		v    Values
		want bool
	}{
		{"a/web/pay-x", withTeam, true},
		{"a/web/ops-x", withTeam, true}, // a label: any value its writer could set
		{"a/web/pay-x", noTeam, true},
		{"a/web/a.b_c-d-x", noTeam, true},
		{"a/web/*-x", noTeam, false},                               // no label value
		{"a/web/p/q-x", noTeam, false},                             // more than one segment
		{"a/web/-x", noTeam, false},                                // empty
		{"a/web/" + strings.Repeat("v", 64) + "-x", noTeam, false}, // longer than a label value
		{"b/web/pay-x", noTeam, false},                             // another namespace
		{"a/api/pay-x", noTeam, false},                             // another workload
		{"a/web/pay-y", noTeam, false},                             // another literal
		{"a/web/pay-x/more", noTeam, false},
		{"xa/web/pay-x", noTeam, false},
	} {
		if got := tmpl.Matches(tc.s, tc.v); got != tc.want {
			t.Errorf("Matches(%q, %+v) = %t, want %t", tc.s, tc.v, got, tc.want)
		}
	}
	// Literal text with regular expression syntax is literal.
	dots, err := Parse("a.b/{name}")
	if err != nil {
		t.Fatal(err)
	}
	if dots.Matches("aXb/web", noTeam) || !dots.Matches("a.b/web", noTeam) {
		t.Error("a '.' of the template matched another character, or not itself")
	}
}
