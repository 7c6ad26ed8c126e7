package testenv

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Refusal is an admission policy that refuses writes of one resource: a
// ValidatingAdmissionPolicy and its binding, both named Name. A write of
// Group/Resource (Group "" is the core group) by one of Operations
// ("CREATE", "UPDATE") is refused, with Reason ("Invalid", "Forbidden")
// and Message, unless the CEL Expression holds. MessageExpression, a CEL
// string expression, words the message from the request instead (say,
// quoting the object).
type Refusal struct {
	Name, Group, Resource string
	Operations            []string
	Expression            string
	Reason, Message       string
	MessageExpression     string
}

// RefuseWrites installs r through c and returns the two objects it
// created (delete them to lift the refusal). The API server applies a new
// policy after a moment: probe with a dry run until it refuses.
func RefuseWrites(ctx context.Context, c client.Client, r Refusal) ([]client.Object, error) {
	ops := make([]any, len(r.Operations))
	for i, op := range r.Operations {
		ops[i] = op
	}
	validation := map[string]any{"expression": r.Expression, "reason": r.Reason, "message": r.Message}
	if r.MessageExpression != "" {
		validation["messageExpression"] = r.MessageExpression
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
		"spec":     map[string]any{"policyName": r.Name, "validationActions": []any{"Deny"}},
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
