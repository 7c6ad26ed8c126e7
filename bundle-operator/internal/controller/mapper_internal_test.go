package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
)

// TestANamespaceEventWhoseListFailsIsLogged: when the TrustBundles cannot
// be listed for a namespace event, the failure is logged with the
// namespace, not dropped.
func TestANamespaceEventWhoseListFailsIsLogged(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	// The fault a real API server cannot produce on demand: the list fails.
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("the cache is not synced")
		},
	}).Build()
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
	ctx := logf.IntoContext(context.Background(), log)
	if reqs := allTrustBundles(c)(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); len(reqs) != 0 {
		t.Fatalf("requests from a failed list: %v", reqs)
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{"the cache is not synced", "team-a"} {
		if !strings.Contains(all, want) {
			t.Errorf("the log does not name %q:\n%s", want, all)
		}
	}
}
