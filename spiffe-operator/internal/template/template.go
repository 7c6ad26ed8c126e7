package template

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Variables a template may use.
const (
	VarNamespace      = "namespace"
	VarServiceAccount = "serviceAccount"
	VarKind           = "kind"
	VarName           = "name"
	// VarLabelPrefix starts a label variable: {label:app.kubernetes.io/name}.
	VarLabelPrefix = "label:"

	// Variables of parent ID templates (ParseParent), rendered per node.
	VarNodeName    = "nodeName"
	VarNodeUID     = "nodeUID"
	VarClusterName = "clusterName"
	VarTrustDomain = "trustDomain"

	// Variables of pod templates (ParsePod), besides namespace,
	// serviceAccount, labels (the pod's), nodeName, clusterName and
	// trustDomain.
	VarPodName   = "podName"
	VarOwnerKind = "ownerKind"
	VarOwnerName = "ownerName"
	// VarAnnotationPrefix starts an annotation variable: {annotation:example.com/role}.
	VarAnnotationPrefix = "annotation:"
)

// Values are what a template is rendered with: one workload.
type Values struct {
	// Namespace of the workload.
	Namespace string
	// ServiceAccount of the workload's pods.
	ServiceAccount string
	// Kind of the workload, e.g. Deployment.
	Kind string
	// Name of the workload.
	Name string
	// Labels of the workload.
	Labels map[string]string

	// NodeName and NodeUID are those of the Node object (parent templates).
	NodeName, NodeUID string
	// ClusterName is the operator's cluster name (parent templates).
	ClusterName string
	// TrustDomain is the policy's trust domain (parent and pod templates).
	TrustDomain string

	// PodName, OwnerKind and OwnerName are the pod's name and its
	// controller's (pod templates).
	PodName, OwnerKind, OwnerName string
	// Annotations are the pod's annotations (pod templates).
	Annotations map[string]string
}

// Template is a parsed template.
type Template struct {
	source string
	parts  []part
	// perWorkload is true when the template names something a single
	// workload has (name, kind or a label) rather than its service account.
	perWorkload bool
	// parent is true for a parent ID template: node variables only.
	parent bool
	// selector is true for a selector value template: ':' and '@' are
	// literal characters too.
	selector bool
	// pod is true for a pod template: pod variables instead of {kind} and {name}.
	pod bool
	// uses records the variables used, by name (labels excluded).
	uses map[string]bool
}

type part struct {
	literal string
	// variable is set for a variable part: one of the Var constants, or a
	// label key when label is true, an annotation key when annotation is.
	variable   string
	label      bool
	annotation bool
}

// Parse parses source. It fails on an unknown variable, an unclosed brace,
// an invalid label key or a character outside [A-Za-z0-9._-/*].
func Parse(source string) (*Template, error) {
	return parse(&Template{source: source})
}

// ParseParent parses a parent ID template: literal text plus {nodeName},
// {nodeUID}, {clusterName} and {trustDomain}. It fails as Parse does, and
// when the template names no node ({nodeName} or {nodeUID}): a per-node
// parent must differ between nodes.
func ParseParent(source string) (*Template, error) {
	t, err := parse(&Template{source: source, parent: true})
	if err != nil {
		return nil, err
	}
	if !t.Uses(VarNodeName) && !t.Uses(VarNodeUID) {
		return nil, fmt.Errorf("names no node: use {nodeName} or {nodeUID}")
	}
	return t, nil
}

// ParseSelectorValue parses the value part of a selector template (what
// follows "k8s:<type>:"): the workload variables of Parse, and literal text
// that may also hold ':' and '@' (as in image references).
func ParseSelectorValue(source string) (*Template, error) {
	return parse(&Template{source: source, selector: true})
}

// ParsePod parses a template of a pod-selecting policy: {namespace},
// {serviceAccount}, {label:<key>} (the pod's labels), {podName},
// {ownerKind}, {ownerName} (its controller's), {nodeName},
// {annotation:<key>}, {clusterName} and {trustDomain}.
func ParsePod(source string) (*Template, error) {
	return parse(&Template{source: source, pod: true})
}

func parse(t *Template) (*Template, error) {
	source := t.source
	t.uses = map[string]bool{}
	rest := source
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if err := t.addLiteral(rest); err != nil {
				return nil, err
			}
			break
		}
		if open > 0 {
			if err := t.addLiteral(rest[:open]); err != nil {
				return nil, err
			}
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("unclosed '{' at %q", rest[open:])
		}
		if err := t.addVariable(rest[open+1 : open+end]); err != nil {
			return nil, err
		}
		rest = rest[open+end+1:]
	}
	if len(t.parts) == 0 {
		return nil, fmt.Errorf("empty template")
	}
	return t, nil
}

func (t *Template) addLiteral(s string) error {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '-' || r == '_' || r == '/' || r == '*' || t.selector && (r == ':' || r == '@')
		if !ok {
			return fmt.Errorf("character %q is not allowed", r)
		}
	}
	t.parts = append(t.parts, part{literal: s})
	return nil
}

func (t *Template) addVariable(v string) error {
	if t.parent {
		switch v {
		case VarNodeName, VarNodeUID, VarClusterName, VarTrustDomain:
			t.uses[v] = true
			t.parts = append(t.parts, part{variable: v})
			return nil
		}
		return fmt.Errorf("unknown variable {%s}: use nodeName, nodeUID, clusterName or trustDomain", v)
	}
	if t.pod {
		switch v {
		case VarNamespace, VarServiceAccount, VarPodName, VarOwnerKind, VarOwnerName, VarNodeName, VarClusterName, VarTrustDomain:
			t.uses[v] = true
			t.parts = append(t.parts, part{variable: v})
			return nil
		}
		if key, ok := strings.CutPrefix(v, VarAnnotationPrefix); ok {
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return fmt.Errorf("invalid annotation key in {%s}: %s", v, strings.Join(errs, "; "))
			}
			t.parts = append(t.parts, part{variable: key, annotation: true})
			return nil
		}
		if !strings.HasPrefix(v, VarLabelPrefix) {
			return fmt.Errorf("unknown variable {%s}: use namespace, serviceAccount, podName, ownerKind, ownerName, nodeName, "+
				"clusterName, trustDomain, label:<key> or annotation:<key>", v)
		}
	}
	switch v {
	case VarNamespace, VarServiceAccount:
	case VarKind, VarName:
		t.perWorkload = true
	default:
		key, ok := strings.CutPrefix(v, VarLabelPrefix)
		if !ok {
			return fmt.Errorf("unknown variable {%s}: use namespace, serviceAccount, kind, name or label:<key>", v)
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return fmt.Errorf("invalid label key in {%s}: %s", v, strings.Join(errs, "; "))
		}
		t.perWorkload = true
		t.parts = append(t.parts, part{variable: key, label: true})
		return nil
	}
	t.uses[v] = true
	t.parts = append(t.parts, part{variable: v})
	return nil
}

// Uses reports whether the template uses variable v (one of the Var
// constants; not a label).
func (t *Template) Uses(v string) bool { return t.uses[v] }

// String returns the source of the template.
func (t *Template) String() string { return t.source }

// PerWorkload reports whether the template names something only one
// workload has ({name}, {kind} or a label). Entries rendered from such a
// template must also select the workload's own pods.
func (t *Template) PerWorkload() bool { return t.perWorkload }

// Render renders the template for v. It fails when a variable has no value:
// a missing label or an empty service account is never rendered as "".
func (t *Template) Render(v Values) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.literal != "" {
			b.WriteString(p.literal)
			continue
		}
		val, name := "", "{"+p.variable+"}"
		switch {
		case p.label:
			name = "{" + VarLabelPrefix + p.variable + "}"
			var ok bool
			if val, ok = v.Labels[p.variable]; !ok {
				return "", fmt.Errorf("%s: the workload has no label %q", name, p.variable)
			}
		case p.annotation:
			name = "{" + VarAnnotationPrefix + p.variable + "}"
			var ok bool
			if val, ok = v.Annotations[p.variable]; !ok {
				return "", fmt.Errorf("%s: the pod has no annotation %q", name, p.variable)
			}
		default:
			switch p.variable {
			case VarNamespace:
				val = v.Namespace
			case VarServiceAccount:
				val = v.ServiceAccount
			case VarKind:
				val = v.Kind
			case VarName:
				val = v.Name
			case VarNodeName:
				val = v.NodeName
			case VarNodeUID:
				val = v.NodeUID
			case VarClusterName:
				val = v.ClusterName
			case VarTrustDomain:
				val = v.TrustDomain
			case VarPodName:
				val = v.PodName
			case VarOwnerKind:
				val = v.OwnerKind
			case VarOwnerName:
				val = v.OwnerName
			}
		}
		if val == "" {
			return "", fmt.Errorf("%s: empty value", name)
		}
		// A variable is one path segment: a value with '/' (an annotation
		// may hold one) would let whoever sets it write more of the ID.
		if strings.ContainsRune(val, '/') {
			return "", fmt.Errorf("%s: the value %q contains '/'", name, val)
		}
		b.WriteString(val)
	}
	return b.String(), nil
}

// labelValue matches what a label value may be (Kubernetes' syntax, at
// most 63 characters, not empty here).
const labelValue = `[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?`

// Matches reports whether s is what t could render for the workload v
// describes: every label variable renders to some label value (whoever
// writes the workload chooses its labels, so a value it had before, or
// could have set, is as good as the one it has now), and every other
// variable to its value in v, or where v has none (an annotation the pod
// lacks) to some non-empty text without '/'. A record of an earlier
// rendering may be checked with it: one written by someone else names
// nothing the template never would for this workload, whatever labels it
// is given.
func (t *Template) Matches(s string, v Values) bool {
	var b strings.Builder
	b.WriteString("^")
	for _, p := range t.parts {
		switch {
		case p.literal != "":
			b.WriteString(regexp.QuoteMeta(p.literal))
		case p.label:
			b.WriteString(labelValue)
		default:
			// Render fails on a missing or bad value of this one variable,
			// and succeeds otherwise: it is the value this part renders to.
			one := &Template{parts: []part{p}}
			if val, err := one.Render(v); err == nil {
				b.WriteString(regexp.QuoteMeta(val))
			} else {
				b.WriteString("[^/]+")
			}
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(s)
}
