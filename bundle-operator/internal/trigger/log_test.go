package trigger

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
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// unavailableSpire fails every read, as a SPIRE server that is down does.
type unavailableSpire struct{}

func (unavailableSpire) ServerBundle(context.Context) (*spire.Bundle, error) {
	return nil, errors.New("spire server is down")
}

func (unavailableSpire) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	return nil, errors.New("spire server is down")
}

// TestPollLogsWhatItCannotRead: a source or SPIRE read that fails still
// requeues once it can be read again, and the failure is logged with what
// failed and for which TrustBundle, not only folded into a revision string.
func TestPollLogsWhatItCannotRead(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	tb := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "tb-with-sources"},
		Spec: v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{
			{SPIRE: &v1alpha1.SPIRESource{}},
			{ConfigMap: &v1alpha1.KeySelector{Namespace: "src", Name: "ca", Key: "ca.crt"}},
		}}}
	// The fault a real API server cannot produce on demand: reads fail.
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(tb).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("the API server timed out")
		},
	}).Build()
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
	p := &Poller{Client: c, Sources: &source.Resolver{Reader: c, Namespaces: []string{"src"}}, Spire: unavailableSpire{},
		Events: make(chan event.TypedGenericEvent[*v1alpha1.TrustBundle], 1)}
	if err := p.poll(logf.IntoContext(context.Background(), log), newPollState()); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{"the API server timed out", "tb-with-sources", "spire server is down"} {
		if !strings.Contains(all, want) {
			t.Errorf("the log does not name %q:\n%s", want, all)
		}
	}
}
