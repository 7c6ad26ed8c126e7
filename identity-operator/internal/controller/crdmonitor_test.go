package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// A failed list of the bindings must not lose the requeue that a change of
// the CRD asks for: the next check tries again, and only bindings to
// InferencePools are requeued, once. (The list failure is injected; the
// monitor against a real API server is the "InferencePool CRD installed
// after startup" spec.)
func TestTheCRDMonitorRequeuesAfterAFailedListOfBindings(t *testing.T) {
	s, toPool, toDeployment := twoBindings(t)
	failList := true
	bindings := fake.NewClientBuilder().WithScheme(s).WithObjects(toPool, toDeployment).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, o ...client.ListOption) error {
			if failList {
				return errors.New("transient list failure")
			}
			return c.List(ctx, l, o...)
		}}).Build()
	requeued := make(chan event.TypedGenericEvent[*v1alpha1.IdentityBinding], 10)
	serving := &pool.Serving{}
	m := newCRDMonitor(fake.NewClientBuilder().Build(), bindings, serving, requeued, 0, logr.Discard())
	ctx := context.Background()

	m.check(ctx)
	if why := serving.NotServing(); why != "is not installed" {
		t.Fatalf("no CRD: want it recorded as not installed, got %q", why)
	}
	if len(requeued) != 0 {
		t.Fatalf("the list failed, yet %d bindings were requeued", len(requeued))
	}
	failList = false
	m.check(ctx)
	if len(requeued) != 1 {
		t.Fatalf("want the one binding to an InferencePool requeued at the next check, got %d", len(requeued))
	}
	if got := (<-requeued).Object; got.Name != toPool.Name {
		t.Fatalf("requeued %s, want %s", got.Name, toPool.Name)
	}
	m.check(ctx)
	if len(requeued) != 0 {
		t.Fatalf("nothing changed since, yet %d bindings were requeued again", len(requeued))
	}
}

// twoBindings returns a scheme with the operator's API, a binding to an
// InferencePool and one to a Deployment, in one namespace.
func twoBindings(t *testing.T) (s *runtime.Scheme, toPool, toDeployment *v1alpha1.IdentityBinding) {
	t.Helper()
	s = runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	toPool = &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "llm"},
		Spec: v1alpha1.IdentityBindingSpec{PoolRef: v1alpha1.PoolReference{Name: "llm"}}}
	toDeployment = &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web"},
		Spec: v1alpha1.IdentityBindingSpec{PoolRef: v1alpha1.PoolReference{Group: v1alpha1.AppsGroup, Kind: v1alpha1.DeploymentKind, Name: "web"}}}
	return s, toPool, toDeployment
}
