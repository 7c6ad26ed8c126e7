package boundary_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/identity-operator/internal/boundary"
)

// installed returns every policy of boundary.Policies with its binding, as
// config/policy ships them (read from its files), changed by edit.
func installed(t *testing.T, edit func(name string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object) []client.Object {
	t.Helper()
	dir := filepath.Join("..", "..", "config", "policy")
	read := func(file string, into any) {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(raw, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	files := map[string]string{
		"identity-boundary.trustplane.dev":           "identity-boundary",
		"identity-boundary-immutable.trustplane.dev": "identity-boundary-immutable",
		"identity-boundary-workloads.trustplane.dev": "identity-boundary-workloads",
	}
	var out []client.Object
	for _, name := range boundary.Policies() {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		read(files[name]+"-policy.yaml", p)
		read(files[name]+"-binding.yaml", b)
		if p.Name != name || b.Name != name {
			t.Fatalf("config/policy names %s and %s, want %s", p.Name, b.Name, name)
		}
		out = append(out, edit(name, p, b)...)
	}
	return out
}

// TestReadNamesEveryPolicyOrBindingNotInForce: config/policy as shipped is
// in force, and each change of it that opens the boundary is named. The
// real API server case (a binding deleted, then warning only) is the
// controller suite's BoundaryEnforced spec.
func TestReadNamesEveryPolicyOrBindingNotInForce(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	first, second, third := boundary.Policies()[0], boundary.Policies()[1], boundary.Policies()[2]
	for _, tc := range []struct {
		name string
		edit func(string, *admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object
		want []string
	}{
		{"all in force", func(_ string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			return []client.Object{p, b}
		}, nil},
		{"a policy and another's binding missing", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			switch n {
			case first:
				return []client.Object{b}
			case second:
				return []client.Object{p}
			}
			return []client.Object{p, b}
		}, []string{"policy " + first + " is not installed", "binding " + second + " is not installed"}},
		{"a binding of another policy", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			if n == first {
				b.Spec.PolicyName = "something-else"
			}
			return []client.Object{p, b}
		}, []string{"binding " + first + ` binds policy "something-else"`}},
		{"a binding that audits and warns", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			if n == second {
				b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit, admissionregistrationv1.Warn}
			}
			return []client.Object{p, b}
		}, []string{"binding " + second + " does not deny"}},
		{"a policy that fails open", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			if n == second {
				ignore := admissionregistrationv1.Ignore
				p.Spec.FailurePolicy = &ignore
			}
			return []client.Object{p, b}
		}, []string{"policy " + second + " fails open"}},
		{"parameters read from the request's namespace", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			if n == first {
				b.Spec.ParamRef.Namespace = ""
			}
			return []client.Object{p, b}
		}, []string{"binding " + first + " does not read its parameters from the ConfigMap identity-boundary-admission of a fixed namespace"}},
		{"requests allowed while the parameters are missing", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			if n == third {
				allow := admissionregistrationv1.AllowAction
				b.Spec.ParamRef.ParameterNotFoundAction = &allow
			}
			return []client.Object{p, b}
		}, []string{"binding " + third + " allows requests while its parameters are missing"}},
		{"namespaces, resources and objects left out", func(n string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object {
			switch n {
			case first:
				b.Spec.MatchResources.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"boundary": "on"}}
			case second:
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{}}}
			case third:
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"checked": "yes"}}}
			}
			return []client.Object{p, b}
		}, []string{"binding " + first + " leaves out namespaces", "binding " + second + " narrows or excludes resources", "binding " + third + " leaves out objects"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(installed(t, tc.edit)...).Build()
			why, err := boundary.Read(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.want) == 0 && why != "" {
				t.Fatalf("want in force, got %q", why)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("want %q in %q", w, why)
				}
			}
			if got := strings.Count(why, ";") + 1; len(tc.want) > 0 && got != len(tc.want) {
				t.Errorf("%d problems named, want %d: %q", got, len(tc.want), why)
			}
		})
	}

	t.Run("a read refused says nothing either way", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, first, nil)
			}}).Build()
		if why, err := boundary.Read(context.Background(), c); err == nil || why != "" {
			t.Fatalf("want an error and no verdict, got %q, %v", why, err)
		}
	})
}

// TestStateKnowsOnlyWhatWasRead: nothing is known before the first read; a
// change, and only a change, is reported; unreadable keeps its first reason
// until a read succeeds; a nil State knows nothing.
func TestStateKnowsOnlyWhatWasRead(t *testing.T) {
	var s boundary.State
	if s.Get().Known {
		t.Fatal("known before any read")
	}
	if !s.Set("") {
		t.Fatal("the first read is a change")
	}
	if s.Set("") {
		t.Fatal("the same read again is no change")
	}
	if !s.Set("policy x is not installed") {
		t.Fatal("a new problem is a change")
	}
	if r := s.Get(); !r.Known || r.Why != "policy x is not installed" || r.Unreadable != "" {
		t.Fatalf("got %+v", r)
	}
	if !s.SetUnreadable("forbidden") || s.SetUnreadable("timeout") {
		t.Fatal("becoming unreadable is one change, however the next errors read")
	}
	if r := s.Get(); r.Unreadable != "forbidden" || r.Why != "" {
		t.Fatalf("got %+v", r)
	}
	if !s.Set("") || s.Get().Unreadable != "" {
		t.Fatal("a read that succeeds again ends the unreadable state")
	}
	if !s.SetUnreadable("") || s.Get().Unreadable == "" {
		t.Fatal("an error without words must not read as in force")
	}
	var none *boundary.State
	if none.Get().Known {
		t.Fatal("a nil State knows something")
	}
}
