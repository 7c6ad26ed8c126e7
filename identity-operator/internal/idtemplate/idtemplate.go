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

// OutsideServiceAccountError is a template that renders a valid path which
// does not lie under ns/<namespace>/sa/<service account>/: a binding may
// only name identities of its own namespace and service account.
type OutsideServiceAccountError struct {
	// Template is the path template as written.
	Template string
	// Path is the rendered path, with a leading "/".
	Path string
	// Prefix is the path prefix the rendered path must start with.
	Prefix string
}

// Error implements error.
func (e *OutsideServiceAccountError) Error() string {
	return fmt.Sprintf("template %q renders %q, which does not start with the whole segments %q followed by at least one more segment", e.Template, e.Path, e.Prefix)
}

var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// Render returns the SPIFFE ID "spiffe://<td>/<path>" for template (the
// default when empty). Unknown placeholders, stray braces and paths that are
// not valid SPIFFE ID paths are errors, and so is a path that does not start
// with the whole segments ns/<namespace>/sa/<service account>/ and go on
// after them (an *OutsideServiceAccountError).
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
	if !underServiceAccount(id.Path(), v.Namespace, v.ServiceAccount) {
		return "", &OutsideServiceAccountError{Template: template, Path: path, Prefix: "ns/" + v.Namespace + "/sa/" + v.ServiceAccount + "/"}
	}
	if n := len(id.String()); n > MaxIDLength {
		return "", fmt.Errorf("template %q renders a SPIFFE ID of %d bytes for service account %s/%s, over the %d bytes a SPIFFE ID may have",
			template, n, v.Namespace, v.ServiceAccount, MaxIDLength)
	}
	return id.String(), nil
}

// MaxIDLength is the longest SPIFFE ID Render returns, in bytes: the limit
// of the SPIFFE specification, and of SpiffeEntry's spiffeID.
const MaxIDLength = 2048

// underServiceAccount reports whether path ("/a/b/...") has the segments
// ns, namespace, sa, serviceAccount first and at least one after them.
func underServiceAccount(path, namespace, serviceAccount string) bool {
	segs := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 5)
	return len(segs) == 5 && segs[0] == "ns" && segs[1] == namespace && segs[2] == "sa" && segs[3] == serviceAccount
}
