package boundary_test

import (
	"context"
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

	"github.com/trustplane/trustplane/identity-operator/internal/boundary"
)

// installed returns every policy of boundary.Policies with a binding of the
// same name that denies, as config/policy installs them, changed by edit.
func installed(edit func(name string, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []client.Object) []client.Object {
	var out []client.Object
	for _, name := range boundary.Policies() {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
		out = append(out, edit(name, p, b)...)
	}
	return out
}

// TestReadNamesEveryPolicyOrBindingNotInForce: the real API server case
// (a binding deleted, then warning only) is the controller suite's
// BoundaryEnforced spec; this covers every shape Read tells apart.
func TestReadNamesEveryPolicyOrBindingNotInForce(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	first, second := boundary.Policies()[0], boundary.Policies()[1]
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(installed(tc.edit)...).Build()
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
// change, and only a change, is reported; a nil State knows nothing.
func TestStateKnowsOnlyWhatWasRead(t *testing.T) {
	var s boundary.State
	if _, known := s.Get(); known {
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
	if why, known := s.Get(); !known || why != "policy x is not installed" {
		t.Fatalf("got %q, %v", why, known)
	}
	var none *boundary.State
	if _, known := none.Get(); known {
		t.Fatal("a nil State knows something")
	}
}
