package idtemplate

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// DefaultPathTemplate is used when a binding sets no template.
const DefaultPathTemplate = "ns/{namespace}/sa/{serviceAccount}/pool/{pool}/variant/{variant}"

// Vars are the values a template may refer to.
type Vars struct {
	// Namespace is the binding's namespace ({namespace}).
	Namespace string
	// ServiceAccount is the binding's service account ({serviceAccount}).
	ServiceAccount string
	// Pool is the name of the referenced pool ({pool}).
	Pool string
	// Variant is the identity boundary ({variant}).
	Variant string
}

var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// Render returns the SPIFFE ID "spiffe://<td>/<path>" for template (the
// default when empty). Unknown placeholders, stray braces and paths that are
// not valid SPIFFE ID paths are errors.
func Render(td spiffeid.TrustDomain, template string, v Vars) (string, error) {
	if td.IsZero() {
		return "", fmt.Errorf("trust domain is not set")
	}
	if template == "" {
		template = DefaultPathTemplate
	}
	values := map[string]string{
		"{namespace}":      v.Namespace,
		"{serviceAccount}": v.ServiceAccount,
		"{pool}":           v.Pool,
		"{variant}":        v.Variant,
	}
	var unknown []string
	path := placeholder.ReplaceAllStringFunc(template, func(p string) string {
		val, ok := values[p]
		if !ok {
			unknown = append(unknown, p)
		}
		return val
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("template %q uses unknown placeholders %v (known: {namespace}, {serviceAccount}, {pool}, {variant})", template, unknown)
	}
	if strings.ContainsAny(path, "{}") {
		return "", fmt.Errorf("template %q has unbalanced braces", template)
	}
	path = "/" + strings.TrimPrefix(path, "/")
	id, err := spiffeid.FromPath(td, path)
	if err != nil {
		return "", fmt.Errorf("template %q renders invalid path %q: %w", template, path, err)
	}
	return id.String(), nil
}
