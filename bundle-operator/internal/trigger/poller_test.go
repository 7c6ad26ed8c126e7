package trigger

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

type fakeSpire struct{ seq uint64 }

func (f *fakeSpire) ServerBundle(context.Context) (*spire.Bundle, error) {
	return &spire.Bundle{TrustDomain: "example.org", SequenceNumber: f.seq, X509Authorities: [][]byte{{byte(f.seq)}}}, nil
}
func (f *fakeSpire) FederatedBundles(context.Context) (map[string]*spire.Bundle, error) {
	return map[string]*spire.Bundle{}, nil
}

// TestPollRequeuesOnlyWhatChanged proves the trigger rules: a SPIRE change
// requeues the bundles with a spire source, a source edit requeues its
// bundle, a due grace period requeues, and a quiet poll requeues nothing.
func TestPollRequeuesOnlyWhatChanged(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "src"}, Data: map[string]string{"ca": "x"}}
	fromSpire := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "from-spire"},
		Spec: v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}}}
	fromCM := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "from-cm"},
		Spec: v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: "ns", Name: "src", Key: "ca"}}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(src, fromSpire, fromCM).Build()
	sp := &fakeSpire{seq: 1}
	events := make(chan event.TypedGenericEvent[*v1alpha1.TrustBundle], 10)
	now := time.Now()
	p := &Poller{Client: c, Sources: &source.Resolver{Reader: c}, Spire: sp, Events: events, Now: func() time.Time { return now }}
	last := map[string]string{}
	poll := func() []string {
		t.Helper()
		if err := p.poll(context.Background(), last); err != nil {
			t.Fatal(err)
		}
		var names []string
		for len(events) > 0 {
			names = append(names, (<-events).Object.Name)
		}
		return names
	}

	if got := poll(); len(got) != 2 {
		t.Fatalf("first poll requeued %v, want both bundles (first sighting)", got)
	}
	if got := poll(); len(got) != 0 {
		t.Fatalf("quiet poll requeued %v", got)
	}
	sp.seq = 2
	if got := poll(); len(got) != 1 || got[0] != "from-spire" {
		t.Fatalf("after a SPIRE change requeued %v, want [from-spire]", got)
	}
	src.Data["ca"] = "y"
	if err := c.Update(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if got := poll(); len(got) != 1 || got[0] != "from-cm" {
		t.Fatalf("after a source edit requeued %v, want [from-cm]", got)
	}

	left := metav1.NewTime(now.Add(-2 * time.Minute))
	fromCM.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: time.Minute}
	fromCM.Status.Certificates = []v1alpha1.PublishedCertificate{{SHA256: "a", LeftSourceAt: &left}}
	cur := &v1alpha1.TrustBundle{}
	if err := c.Get(context.Background(), clientKey(fromCM), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Options = fromCM.Spec.Options
	cur.Status = fromCM.Status
	if err := c.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	if got := poll(); len(got) != 1 || got[0] != "from-cm" {
		t.Fatalf("with a grace period over requeued %v, want [from-cm]", got)
	}
}

func clientKey(tb *v1alpha1.TrustBundle) client.ObjectKey { return client.ObjectKeyFromObject(tb) }
