package selectortemplate

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
)

// Types returns the k8s workload attestor selector types a template may
// add. k8s:ns and k8s:sa come from the workload itself; k8s:pod-uid and
// k8s:pod-name name single pods and are not for policies of workloads.
func Types() []string {
	return []string{"container-name", "container-image", "pod-label", "pod-owner", "pod-image", "pod-init-image", "node-name"}
}

// Template is a parsed selector template, e.g. k8s:container-name:app.
type Template struct {
	source string
	typ    string
	value  *template.Template
}

// Parse parses "k8s:<type>:<value template>"; the type must be one of
// Types and the value a template of the workload variables.
func Parse(source string) (*Template, error) {
	rest, ok := strings.CutPrefix(source, "k8s:")
	if !ok {
		return nil, fmt.Errorf("%q: want k8s:<type>:<value>, a selector of the k8s workload attestor", source)
	}
	typ, value, ok := strings.Cut(rest, ":")
	if !ok || !slices.Contains(Types(), typ) {
		return nil, fmt.Errorf("%q: the selector type must be one of %s", source, strings.Join(Types(), ", "))
	}
	v, err := template.ParseSelectorValue(value)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", source, err)
	}
	return &Template{source: source, typ: typ, value: v}, nil
}

// String returns the source of the template.
func (t *Template) String() string { return t.source }

// Render renders the selector for v and checks that its value has the
// shape the attestor produces for its type, so that it can match at all,
// and that it is no longer than an entry's selector may be.
func (t *Template) Render(v template.Values) (entries.Selector, error) {
	val, err := t.value.Render(v)
	if err != nil {
		return entries.Selector{}, err
	}
	if err := check(t.typ, val); err != nil {
		return entries.Selector{}, fmt.Errorf("renders k8s:%s:%s: %w", t.typ, val, err)
	}
	sel := entries.Selector{Type: "k8s", Value: t.typ + ":" + val}
	if err := entries.CheckSelectorLength(sel); err != nil {
		return entries.Selector{}, err
	}
	return sel, nil
}

// Matches reports whether sel is a selector t could render for the
// workload v describes (template.Template.Matches: a label any value),
// with the shape the attestor produces for its type.
func (t *Template) Matches(sel entries.Selector, v template.Values) bool {
	val, ok := strings.CutPrefix(sel.Value, t.typ+":")
	return ok && sel.Type == "k8s" && t.value.Matches(val, v) && check(t.typ, val) == nil &&
		entries.CheckSelectorLength(sel) == nil
}

// check validates a rendered value of a selector type.
func check(typ, val string) error {
	var errs []string
	switch typ {
	case "container-name":
		errs = validation.IsDNS1123Label(val)
	case "node-name":
		errs = validation.IsDNS1123Subdomain(val)
	case "pod-label":
		k, v, ok := strings.Cut(val, ":")
		if !ok {
			return fmt.Errorf("want <label key>:<label value>")
		}
		errs = append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
	case "pod-owner":
		kind, name, ok := strings.Cut(val, ":")
		if !ok || kind == "" {
			return fmt.Errorf("want <owner kind>:<owner name>")
		}
		errs = validation.IsDNS1123Subdomain(name)
	case "container-image", "pod-image", "pod-init-image":
		if strings.HasPrefix(val, ":") || strings.HasPrefix(val, "@") {
			return fmt.Errorf("not an image reference")
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
