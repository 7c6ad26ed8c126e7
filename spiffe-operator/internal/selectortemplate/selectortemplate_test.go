package selectortemplate

import (
	"strings"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
)

func TestParseAcceptsOnlyAttestorSelectorsAWorkloadPolicyMayAdd(t *testing.T) {
	for _, src := range []string{
		"k8s:container-name:app", "k8s:container-image:registry.example/app:1.2@sha256:abc",
		"k8s:pod-label:tier:{label:tier}", "k8s:pod-owner:ReplicaSet:{name}-x", "k8s:node-name:n1",
	} {
		if _, err := Parse(src); err != nil {
			t.Errorf("Parse(%q): %v", src, err)
		}
	}
	for _, src := range []string{
		"unix:uid:0", "k8s:ns:other", "k8s:sa:admin", "k8s:pod-uid:123", "k8s:pod-name:x", "k8s:container-name",
		"k8s:container-name:", "k8s:container-name:{pod}", "k8s:container-name:a b", "k8s:container-name:{name",
	} {
		if _, err := Parse(src); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", src)
		}
	}
}

func TestRenderChecksTheValueShapeOfItsType(t *testing.T) {
	v := template.Values{Namespace: "a", ServiceAccount: "sa", Kind: "Deployment", Name: "Web_1",
		Labels: map[string]string{"tier": "fe"}}
	for src, want := range map[string]string{
		"k8s:container-name:app":          "container-name:app",
		"k8s:pod-label:tier:{label:tier}": "pod-label:tier:fe",
		"k8s:pod-owner:Deployment:web":    "pod-owner:Deployment:web",
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		sel, err := tpl.Render(v)
		if err != nil || sel.Type != "k8s" || sel.Value != want {
			t.Errorf("Render(%q) = %v, %v; want k8s:%s", src, sel, err, want)
		}
	}
	for src, msg := range map[string]string{
		"k8s:container-name:{name}":          "renders k8s:container-name:Web_1",
		"k8s:pod-label:{name}":               "want <label key>:<label value>",
		"k8s:pod-label:tier:{label:missing}": "no label",
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tpl.Render(v); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Render(%q): err = %v, want %q", src, err, msg)
		}
	}
}
