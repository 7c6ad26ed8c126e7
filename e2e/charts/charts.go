// Package charts keeps the Helm chart under charts/trustplane in step with
// the operators: the files it copies from their config/ directories (CRDs,
// RBAC rules generated from kubebuilder markers, identity-operator's
// admission policies), the flag values of its values.schema.json (read from
// each operator binary's --help), and the values table of its README.
// `make generate` writes them (cmd/chartgen); the package's tests fail when
// they are stale, and lint, render and apply the chart and the one-file
// installers against a real kube-apiserver.
package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// Dir is the chart's directory, relative to the repository root.
const Dir = "charts/trustplane"

// ValuesKey is the key of an operator's section in the chart's values
// (spiffe-operator is spiffeOperator).
func ValuesKey(operator string) string { return ValueKey(operator) }

// copies maps each file the chart carries (relative to the repository root)
// to the operator file it is a copy of.
func copies(root string) (map[string]string, error) {
	out := map[string]string{}
	add := func(dst, src string) { out[path.Join(Dir, "files", dst)] = src }
	for _, o := range operatorimage.Operators() {
		crds, err := filepath.Glob(filepath.Join(root, o.Name, "config", "crd", "bases", "*.yaml"))
		if err != nil {
			return nil, fmt.Errorf("%s CRDs: %w", o.Name, err)
		}
		if len(crds) == 0 {
			return nil, fmt.Errorf("%s has no CRDs in config/crd/bases", o.Name)
		}
		for _, c := range crds {
			add(path.Join(o.Name, "crds", filepath.Base(c)), path.Join(o.Name, "config", "crd", "bases", filepath.Base(c)))
		}
		for _, r := range []string{"role.yaml", "leader_election_role.yaml"} {
			add(path.Join(o.Name, "rbac", r), path.Join(o.Name, "config", "rbac", r))
		}
		// The admission policy that holds the operator's own writes, where
		// it has one.
		own, err := filepath.Glob(filepath.Join(root, o.Name, "config", "rbac", "*_policy*.yaml"))
		if err != nil {
			return nil, fmt.Errorf("%s policies: %w", o.Name, err)
		}
		for _, p := range own {
			add(path.Join(o.Name, "rbac", filepath.Base(p)), path.Join(o.Name, "config", "rbac", filepath.Base(p)))
		}
	}
	add("bundle-operator/rbac/source_role.yaml", "bundle-operator/config/rbac/source_role.yaml")
	add("bundle-operator/rbac/secret_targets_role.yaml", "bundle-operator/config/components/secret-targets/role.yaml")
	add("bundle-operator/rbac/secret_sources_role.yaml", "bundle-operator/config/components/secret-sources/role.yaml")
	policies, err := filepath.Glob(filepath.Join(root, "identity-operator", "config", "policy", "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	for _, p := range policies {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		add(path.Join("identity-operator", "policy", filepath.Base(p)), path.Join("identity-operator", "config", "policy", filepath.Base(p)))
	}
	return out, nil
}

// Expected returns every generated file of the chart (path relative to the
// repository root) with the content it must have. It builds the operators
// to read their flags.
func Expected(ctx context.Context, root string) (map[string][]byte, error) {
	flags := map[string][]Flag{}
	for _, o := range operatorimage.Operators() {
		var err error
		if flags[o.Name], err = OperatorFlags(ctx, root, o.Name); err != nil {
			return nil, err
		}
	}
	return ExpectedWith(root, flags)
}

// ExpectedWith is Expected with the operators' flags (by operator name)
// already read.
func ExpectedWith(root string, flags map[string][]Flag) (map[string][]byte, error) {
	files := map[string][]byte{}
	cp, err := copies(root)
	if err != nil {
		return nil, err
	}
	for dst, src := range cp {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return nil, fmt.Errorf("chart file source: %w", err)
		}
		files[dst] = b
	}
	schemaPath := path.Join(Dir, "values.schema.json")
	raw, err := os.ReadFile(filepath.Join(root, schemaPath))
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	schema, err := WithFlags(raw, flags)
	if err != nil {
		return nil, err
	}
	files[schemaPath] = schema
	values, err := os.ReadFile(filepath.Join(root, Dir, "values.yaml"))
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	table, err := ValuesTable(schema, values, flags)
	if err != nil {
		return nil, err
	}
	readmePath := path.Join(Dir, "README.md")
	readme, err := os.ReadFile(filepath.Join(root, readmePath))
	if err != nil {
		return nil, fmt.Errorf("chart README: %w", err)
	}
	if files[readmePath], err = replaceBetween(readme, tableBegin, tableEnd, table); err != nil {
		return nil, fmt.Errorf("%s: %w", readmePath, err)
	}
	return files, nil
}

// GeneratedDir is the directory whose files are all copies: a file there
// that Expected does not list is stale.
const GeneratedDir = Dir + "/files"

// Write writes the files Expected returns and removes any other file under
// GeneratedDir.
func Write(root string, files map[string][]byte) error {
	err := filepath.WalkDir(filepath.Join(root, GeneratedDir), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			return os.Remove(p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("clean %s: %w", GeneratedDir, err)
	}
	for p, b := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// Markers around the generated values table of the chart's README.
const (
	tableBegin = "<!-- values table: generated by make generate, do not edit -->\n"
	tableEnd   = "<!-- end of values table -->\n"
)

func replaceBetween(doc []byte, begin, end string, with string) ([]byte, error) {
	i := bytes.Index(doc, []byte(begin))
	j := bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %q ... %q markers", strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.WriteString(with)
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// WithFlags returns the schema with the properties of each
// <operator>.flags replaced by the operator's value flags.
func WithFlags(schema []byte, flags map[string][]Flag) ([]byte, error) {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	for op, fs := range flags {
		section, err := lookup(s, ValuesKey(op))
		if err != nil {
			return nil, err
		}
		props := map[string]any{}
		for _, f := range ValueFlags(fs) {
			props[ValueKey(f.Name)] = FlagSchema(f)
		}
		sectionProps, _ := section["properties"].(map[string]any)
		if sectionProps == nil {
			return nil, fmt.Errorf("values.schema.json: %s has no properties", ValuesKey(op))
		}
		sectionProps["flags"] = map[string]any{
			"type":                 "object",
			"description":          "the operator's own flags, each by its name in lower camel case (requeue-after is requeueAfter); unset means the operator's default",
			"additionalProperties": false,
			"properties":           props,
		}
	}
	return marshal(s)
}

func lookup(s map[string]any, key string) (map[string]any, error) {
	props, _ := s["properties"].(map[string]any)
	section, _ := props[key].(map[string]any)
	if section == nil {
		return nil, fmt.Errorf("values.schema.json has no section %s", key)
	}
	return section, nil
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return buf.Bytes(), nil
}

// durationPattern accepts what Go's time.ParseDuration accepts (without a sign).
const durationPattern = `^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`

// numberPattern is a decimal number as a string.
const numberPattern = `^-?[0-9]+(\.[0-9]+)?$`

// FlagSchema is the JSON schema of a flag's value, from its pflag type.
func FlagSchema(f Flag) map[string]any {
	s := map[string]any{"description": f.Usage}
	switch f.Type {
	case "":
		s["type"] = "boolean"
	case "string":
		s["type"] = "string"
	case "strings":
		s["type"] = "array"
		s["items"] = map[string]any{"type": "string"}
	case "int", "int32", "int64":
		s["type"] = "integer"
	case "float", "float32", "float64":
		// helm --set passes 0.5 as a string: take a numeric string too.
		s["type"] = []any{"number", "string"}
		s["pattern"] = numberPattern
	case "duration":
		s["type"] = "string"
		s["pattern"] = durationPattern
	case "level":
		s["anyOf"] = []any{
			map[string]any{"type": "string", "enum": []any{"debug", "info", "error", "panic"}},
			map[string]any{"type": "integer", "minimum": 1},
		}
	case "encoder":
		s["type"] = "string"
		s["enum"] = []any{"json", "console"}
	case "time-encoding":
		s["type"] = "string"
		s["enum"] = []any{"epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano"}
	default:
		s["type"] = "string"
	}
	return s
}

// ValuesTable renders the values of the chart as a Markdown table: every
// leaf of the schema with its type, its default from values.yaml and its
// description; an operator flag's default is the operator's own.
func ValuesTable(schema, values []byte, flags map[string][]Flag) (string, error) {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return "", fmt.Errorf("values.schema.json: %w", err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(values, &v); err != nil {
		return "", fmt.Errorf("values.yaml: %w", err)
	}
	flagDefault := map[string]string{}
	for op, fs := range flags {
		for _, f := range fs {
			flagDefault[ValuesKey(op)+".flags."+ValueKey(f.Name)] = f.Default
		}
	}
	var rows []string
	var walk func(prefix string, node map[string]any, val any)
	walk = func(prefix string, node map[string]any, val any) {
		props, _ := node["properties"].(map[string]any)
		if len(props) == 0 {
			def := "`" + inline(val) + "`"
			if d, ok := flagDefault[prefix]; ok {
				def = "operator's"
				if d != "" {
					def += ": `" + d + "`"
				}
			}
			desc, _ := node["description"].(string)
			desc = strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(desc)
			rows = append(rows, fmt.Sprintf("| `%s` | %s | %s | %s |", prefix, typeOf(node), def, desc))
			return
		}
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m, _ := val.(map[string]any)
		for _, k := range keys {
			child, _ := props[k].(map[string]any)
			name := k
			if prefix != "" {
				name = prefix + "." + k
			}
			walk(name, child, m[k])
		}
	}
	walk("", s, v)
	return "| Value | Type | Default | Description |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n", nil
}

func typeOf(node map[string]any) string {
	switch t := node["type"].(type) {
	case string:
		if p, ok := node["pattern"].(string); ok && p == durationPattern {
			return "duration"
		}
		if e, ok := node["enum"].([]any); ok {
			parts := make([]string, len(e))
			for i, x := range e {
				parts[i] = fmt.Sprint(x)
			}
			return "one of " + strings.Join(parts, ", ")
		}
		if t == "array" {
			if it, ok := node["items"].(map[string]any); ok {
				return "list of " + typeOf(it)
			}
		}
		return t
	case []any:
		if p, ok := node["pattern"].(string); ok && p == numberPattern {
			return "number"
		}
		parts := make([]string, len(t))
		for i, x := range t {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, " or ")
	}
	if _, ok := node["anyOf"]; ok {
		return "level (debug, info, error, panic or an integer)"
	}
	return "any"
}

func inline(v any) string {
	if v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.ReplaceAll(string(b), "|", `\|`)
}
