package trigger

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/testbed"
)

// TestPollRequeuesOnlyWhatChanged proves the trigger rules against a real
// kube-apiserver and spire-server: a SPIRE CA rotation requeues the bundles
// with a spire source, a source edit requeues its bundle, a grace period
// that ended requeues, and a quiet poll requeues nothing.
func TestPollRequeuesOnlyWhatChanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bed := testbed.Start(t)
	sp, spireClient := bed.Spire, bed.SpireClient
	c := bed.ControlPlane.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "trigger-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "src"}, Data: map[string]string{"ca": "x"}}
	fromSpire := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "from-spire"},
		Spec: v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}}}}
	fromCM := &v1alpha1.TrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "from-cm"},
		Spec: v1alpha1.TrustBundleSpec{Sources: []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: ns.Name, Name: "src", Key: "ca"}}}}}
	for _, o := range []client.Object{src, fromSpire, fromCM} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	events := make(chan event.TypedGenericEvent[*v1alpha1.TrustBundle], 10)
	now := time.Now()
	p := &Poller{Client: c, Sources: &source.Resolver{Reader: c, Namespaces: []string{ns.Name}}, Spire: spireClient, Events: events, Now: func() time.Time { return now }}
	st := newPollState()
	poll := func() []string {
		t.Helper()
		if err := p.poll(ctx, st); err != nil {
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
	if out, err := sp.CLI(ctx, "localauthority", "x509", "prepare"); err != nil {
		t.Fatalf("prepare a new CA: %v\n%s", err, out)
	}
	if got := poll(); len(got) != 1 || got[0] != "from-spire" {
		t.Fatalf("after a SPIRE CA rotation requeued %v, want [from-spire]", got)
	}
	src.Data["ca"] = "y"
	if err := c.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	if got := poll(); len(got) != 1 || got[0] != "from-cm" {
		t.Fatalf("after a source edit requeued %v, want [from-cm]", got)
	}

	left := metav1.NewTime(now.Add(-2 * time.Minute))
	cur := &v1alpha1.TrustBundle{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(fromCM), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: time.Minute}
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if got := poll(); len(got) != 0 {
		t.Fatalf("a spec change without a deadline requeued %v (the controller's own watch does that)", got)
	}
	cur.Status.Certificates = []v1alpha1.PublishedCertificate{{SHA256: "a", Subject: "CN=old", NotAfter: metav1.NewTime(now.Add(time.Hour)), LeftSourceAt: &left, PEM: "-"}}
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if got := poll(); len(got) != 1 || got[0] != "from-cm" {
		t.Fatalf("with a grace period over requeued %v, want [from-cm]", got)
	}
	// The source still fails, so the status (and its deadline) does not
	// change: the deadline that passed must not requeue on every poll.
	if got := poll(); len(got) != 0 {
		t.Fatalf("the same passed deadline requeued %v again", got)
	}
}
