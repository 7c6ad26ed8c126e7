package controller_test

// Attacks on how identity-operator uses the framework's lifecycle (the
// environment label, the Controller of common/controller, the janitor's
// moves of outputs) by a tenant with full rights in one namespace, and by
// a second operator instance with another environment name. They drive
// common/controller's Controller around the real handler against
// controller-runtime's fake client (with the handler's indexes); no API
// server: go test -run TestAdversarial ./internal/controller/

import (
	"context"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	commonctrl "github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

var attackTD = spiffeid.RequireTrustDomainFromString(trustDomain)

func attackFakeClient(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, spiffev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&v1alpha1.IdentityBinding{})
	for field, fn := range index.Funcs(attackTD) {
		b = b.WithIndex(&v1alpha1.IdentityBinding{}, field, fn)
	}
	c := b.Build()
	if funcs != nil {
		return interceptor.NewClient(c, *funcs)
	}
	return c
}

// attackOperator is one identity-operator instance: the framework's
// Controller around the real handler, with its own default environment
// and parent ID.
func attackOperator(t *testing.T, c client.Client, name, defaultEnv, parent string, environments ...string) *commonctrl.Controller[*v1alpha1.IdentityBinding] {
	t.Helper()
	h, err := identitybinding.New(c, identitybinding.Options{TrustDomain: attackTD, ParentID: parent, APIReader: c})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DefaultEnvironment = defaultEnv
	cfg.Environments = environments
	return commonctrl.New(name, c, h, commonctrl.Options{Config: cfg, APIReader: c})
}

func attackReconcile(t *testing.T, op *commonctrl.Controller[*v1alpha1.IdentityBinding], key types.NamespacedName) {
	t.Helper()
	if _, err := op.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}, &v1alpha1.IdentityBinding{}); err != nil {
		t.Logf("pass of %s: %v", key, err)
	}
}

func attackBindingIn(ns, name, env, pool string) *v1alpha1.IdentityBinding {
	b := &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Generation: 1},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef:            v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: pool},
			ServiceAccountName: "db",
			IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: "v1"},
		},
	}
	if env != "" {
		b.Labels = map[string]string{labels.Environment: env}
	}
	return b
}

func attackPool(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
}

func attackEntry(t *testing.T, c client.Client, ns, name string) *spiffev1alpha1.SpiffeEntry {
	t.Helper()
	e := &spiffev1alpha1.SpiffeEntry{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: output.Name(ns, name)}, e); err != nil {
		return nil
	}
	return e
}

// TestAdversarialStagingInstanceLeavesProdBindingsOutputAlone: a second
// identity-operator instance runs with another environment name
// (--default-environment=staging) and its own parent ID. Guarantee 1 says
// environments scope who reconciles, and Guarantee 2 that an instance
// writes only what is its own. Safe behaviour: a binding labelled
// trustplane.dev/environment=prod keeps the output the prod instance wrote
// (same parent ID, same resourceVersion) whatever the staging instance's
// passes do; in particular the output is not rewritten back and forth
// between the two instances' parent IDs (each rewrite moves the SPIRE
// entry to another parent: a window without an entry for the running
// pods, Guarantee 3).
func TestAdversarialStagingInstanceLeavesProdBindingsOutputAlone(t *testing.T) {
	b := attackBindingIn("team", "b", "prod", "llm")
	c := attackFakeClient(t, nil, b, attackPool("team", "llm"))
	key := client.ObjectKeyFromObject(b)
	prod := attackOperator(t, c, "prod", "prod", "spiffe://example.org/prod-nodes", "prod")
	staging := attackOperator(t, c, "staging", "staging", "spiffe://example.org/staging-nodes", "staging")

	attackReconcile(t, prod, key)
	e := attackEntry(t, c, "team", "b")
	if e == nil || e.Spec.ParentID != "spiffe://example.org/prod-nodes" {
		t.Fatalf("precondition: the prod instance wrote no output (%v)", e)
	}
	rv := e.ResourceVersion
	parents := []string{e.Spec.ParentID}
	for round := 0; round < 2; round++ {
		for _, op := range []*commonctrl.Controller[*v1alpha1.IdentityBinding]{staging, prod} {
			attackReconcile(t, op, key)
			e = attackEntry(t, c, "team", "b")
			if e == nil {
				parents = append(parents, "<deleted>")
				continue
			}
			if e.ResourceVersion != rv {
				rv = e.ResourceVersion
				parents = append(parents, e.Spec.ParentID)
			}
		}
	}
	if len(parents) > 1 {
		t.Fatalf("the staging instance rewrote the output of a binding of environment prod: its parent ID went %v over 4 passes (2 staging, 2 prod)", parents)
	}
}

// TestAdversarialRelabelledBindingKeepsItsOutput: the tenant moves a Ready
// binding from environment prod to staging and back to no label (the
// instance's default environment is prod), with one instance. Safe
// behaviour (Guarantee 3): the SpiffeEntry is never deleted (no Delete
// call, same UID), carries the binding's current environment, and the
// binding stays Ready.
func TestAdversarialRelabelledBindingKeepsItsOutput(t *testing.T) {
	deletes := 0
	funcs := &interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if _, ok := obj.(*spiffev1alpha1.SpiffeEntry); ok {
			deletes++
		}
		return c.Delete(ctx, obj, opts...)
	}}
	b := attackBindingIn("team", "b", "prod", "llm")
	c := attackFakeClient(t, funcs, b, attackPool("team", "llm"))
	key := client.ObjectKeyFromObject(b)
	op := attackOperator(t, c, "prod", "prod", parentID)
	attackReconcile(t, op, key)
	e := attackEntry(t, c, "team", "b")
	if e == nil {
		t.Fatal("precondition: no output")
	}
	uid := e.UID
	for _, next := range []string{"staging", "", "prod"} {
		cur := &v1alpha1.IdentityBinding{}
		if err := c.Get(context.Background(), key, cur); err != nil {
			t.Fatal(err)
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		if next == "" {
			delete(cur.Labels, labels.Environment)
		} else {
			cur.Labels[labels.Environment] = next
		}
		if err := c.Update(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
		attackReconcile(t, op, key)
		e = attackEntry(t, c, "team", "b")
		want := next
		if want == "" {
			want = "prod"
		}
		if err := c.Get(context.Background(), key, cur); err != nil {
			t.Fatal(err)
		}
		if e == nil || e.UID != uid || deletes != 0 || e.Labels[labels.Environment] != want || !condition.IsReady(cur) {
			t.Fatalf("after relabelling to %q: output %v (UID was %s), SpiffeEntry deletes %d, output environment %q (want %q), Ready %v",
				next, e, uid, deletes, e.Labels[labels.Environment], want, condition.IsReady(cur))
		}
	}
}
