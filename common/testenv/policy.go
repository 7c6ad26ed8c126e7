package testenv

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Refusal is an admission policy that refuses writes of one resource: a
// ValidatingAdmissionPolicy and its binding, both named Name. A write of
// Group/Resource (Group "" is the core group) by one of Operations
// ("CREATE", "UPDATE") is refused, with Reason ("Invalid", "Forbidden")
// and Message, unless the CEL Expression holds. MessageExpression, a CEL
// string expression, words the message from the request instead (say,
// quoting the object). Without a Reason the API server answers Invalid.
// With a Namespace, the binding holds only the objects of that namespace.
type Refusal struct {
	Name, Group, Resource string
	Operations            []string
	Expression            string
	Reason, Message       string
	MessageExpression     string
	Namespace             string
}

// RefuseWrites installs r through c and returns the two objects it
// created (delete them to lift the refusal). The API server applies a new
// policy after a moment: probe with a dry run until it refuses.
func RefuseWrites(ctx context.Context, c client.Client, r Refusal) ([]client.Object, error) {
	ops := make([]any, len(r.Operations))
	for i, op := range r.Operations {
		ops[i] = op
	}
	validation := map[string]any{"expression": r.Expression, "message": r.Message}
	if r.Reason != "" {
		validation["reason"] = r.Reason
	}
	if r.MessageExpression != "" {
		validation["messageExpression"] = r.MessageExpression
	}
	bindingSpec := map[string]any{"policyName": r.Name, "validationActions": []any{"Deny"}}
	if r.Namespace != "" {
		bindingSpec["matchResources"] = map[string]any{"namespaceSelector": map[string]any{
			"matchLabels": map[string]any{"kubernetes.io/metadata.name": r.Namespace}}}
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": r.Name},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{r.Group}, "apiVersions": []any{"*"}, "resources": []any{r.Resource}, "operations": ops,
			}}},
			"validations": []any{validation},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": r.Name},
		"spec":     bindingSpec,
	}}
	var created []client.Object
	for _, obj := range []*unstructured.Unstructured{policy, binding} {
		if err := c.Create(ctx, obj); err != nil {
			return created, fmt.Errorf("create %s %s: %w", obj.GetKind(), r.Name, err)
		}
		created = append(created, obj)
	}
	return created, nil
}

// CreateManifests creates, through c, every object of the YAML files at
// paths (documents separated by "---" lines) as they are written, and
// leaves those that exist: how a suite installs the admission policies an
// operator ships beside its RBAC. A policy is in force a moment after its
// creation: probe for a refusal before relying on it.
func CreateManifests(ctx context.Context, c client.Client, paths ...string) error {
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read manifest: %w", err)
		}
		for i, doc := range strings.Split("\n"+string(raw), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return fmt.Errorf("%s, document %d: %w", path, i+1, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s, %s %s: %w", path, u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

// UntilRefused calls try with 1, 2, 3, ... until it returns an error whose
// message contains says, and returns nil then, or the last answer once
// timeout has passed. The API server puts a new admission policy in force
// a moment after its creation, so a suite probes before it relies on one;
// each try should ask for a change to a fresh value (from n), so that one
// admitted before the policy took effect does not make the next a change
// of nothing, which no policy refuses.
func UntilRefused(ctx context.Context, timeout time.Duration, says string, try func(n int) error) error {
	var last error
	n := 0
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		n++
		last = try(n)
		return last != nil && strings.Contains(last.Error(), says), nil
	})
	if err != nil {
		return fmt.Errorf("no refusal saying %q after %d tries: %w; last answer: %v", says, n, err, last)
	}
	return nil
}

// Admitted sends each of patches to obj through c and returns, sorted, the
// names of those that were not refused with an error containing want, each
// with what came back: a spec of an admission policy expects none, and
// when it fails it names every request that went through, not the first.
// obj is copied for each request, so that none sees another's result.
func Admitted(ctx context.Context, c client.Client, obj client.Object, patches map[string]client.Patch, want string) []string {
	var admitted []string
	for name, p := range patches {
		err := c.Patch(ctx, obj.DeepCopyObject().(client.Object), p)
		if err == nil || !strings.Contains(err.Error(), want) {
			admitted = append(admitted, fmt.Sprintf("%s: %v", name, err))
		}
	}
	slices.Sort(admitted)
	return admitted
}
