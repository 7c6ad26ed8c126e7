package identitybinding_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// TestOnlyAPassThatWritesSendsDryRuns: with both output kinds, a binding's
// first pass creates its two outputs, each after a dry run of its write;
// a pass with nothing to change sends no write at all, dry or not.
func TestOnlyAPassThatWritesSendsDryRuns(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var dry, sent atomic.Int32
	cfg := rest.CopyConfig(cp.Config)
	testenv.ObserveRequests(cfg, func(req *http.Request) {
		path := req.URL.Path
		if req.Method != http.MethodGet && (strings.Contains(path, "/spiffeentries") || strings.Contains(path, "/clusterspiffeids")) {
			if req.URL.Query().Has("dryRun") {
				dry.Add(1)
			} else {
				sent.Add(1)
			}
		}
	})
	_, c := cacheAndClientAs(t, cfg)

	ns := newNamespace(t)
	createWebDeployment(ctx, t, ns)
	b := newBinding(ns, "b")
	b.Spec.PoolRef = v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: "web"}
	g.Expect(cp.Client.Create(ctx, b)).To(Succeed())
	g.Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), &v1alpha1.IdentityBinding{}); err != nil {
			return err
		}
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &appsv1.Deployment{})
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes", WithdrawalRetry: 100 * time.Millisecond,
		APIReader: cp.Client, Outputs: []output.Kind{output.KindSpiffeEntry, output.KindClusterSPIFFEID},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reconcile(t, h, c, b)).To(Succeed())
	g.Expect(dry.Load()).To(BeEquivalentTo(2), "one dry run for each output's create")
	g.Expect(sent.Load()).To(BeEquivalentTo(2), "the two creates")

	name := output.Name(ns, b.Name)
	g.Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, output.New(output.KindSpiffeEntry)); err != nil {
			return err
		}
		return c.Get(ctx, client.ObjectKey{Name: name}, output.New(output.KindClusterSPIFFEID))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "the cache shows both outputs")
	g.Expect(reconcile(t, h, c, b)).To(Succeed())
	g.Expect(dry.Load()).To(BeEquivalentTo(2), "a pass with nothing to write sent a dry run")
	g.Expect(sent.Load()).To(BeEquivalentTo(2), "a pass with nothing to write wrote")
}

// createWebDeployment creates the Deployment "web" in ns, whose pods
// (labelled app=web) run as the service account "serving".
func createWebDeployment(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	web := map[string]string{"app": "web"}
	NewWithT(t).Expect(cp.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: web},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: web},
				Spec:       corev1.PodSpec{ServiceAccountName: "serving", Containers: []corev1.Container{{Name: "app", Image: "example.org/app:1"}}},
			},
		},
	})).To(Succeed())
}

// webBinding is a binding "b" to the Deployment "web" of its namespace,
// reconciled by a handler that writes SpiffeEntries through c.
type webBinding struct {
	h *identitybinding.Handler
	c client.Client
	b *v1alpha1.IdentityBinding
}

// newWebBinding creates the Deployment "web" and the binding in ns, and
// waits until c's cache holds both.
func newWebBinding(ctx context.Context, t *testing.T, c client.Client, ns string) *webBinding {
	t.Helper()
	g := NewWithT(t)
	createWebDeployment(ctx, t, ns)
	b := newBinding(ns, "b")
	b.Spec.PoolRef = v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: "web"}
	g.Expect(cp.Client.Create(ctx, b)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &appsv1.Deployment{}) },
		10*time.Second, 50*time.Millisecond).Should(Succeed())
	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes", WithdrawalRetry: 100 * time.Millisecond,
		APIReader: cp.Client, Outputs: []output.Kind{output.KindSpiffeEntry},
	})
	g.Expect(err).NotTo(HaveOccurred())
	w := &webBinding{h: h, c: c, b: b}
	w.cached(ctx, t, 1)
	return w
}

// cached waits until the cache holds the binding at generation or later,
// and returns it.
func (w *webBinding) cached(ctx context.Context, t *testing.T, generation int64) *v1alpha1.IdentityBinding {
	t.Helper()
	cur := &v1alpha1.IdentityBinding{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(w.c.Get(ctx, client.ObjectKeyFromObject(w.b), cur)).To(Succeed())
		g.Expect(cur.Generation).To(BeNumerically(">=", generation))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	return cur
}

// changeHint sets the binding's hint and returns it once c's cache holds
// the change.
func (w *webBinding) changeHint(ctx context.Context, t *testing.T, hint string) *v1alpha1.IdentityBinding {
	t.Helper()
	b := w.cached(ctx, t, 1)
	b.Spec.Hint = hint
	NewWithT(t).Expect(cp.Client.Update(ctx, b)).To(Succeed())
	return w.cached(ctx, t, b.Generation)
}

// withDefaultRetry returns a handler as w's, with the withdrawal retry a
// deployment has (2 s).
func (w *webBinding) withDefaultRetry(t *testing.T) *identitybinding.Handler {
	t.Helper()
	h, err := identitybinding.New(w.c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes",
		APIReader: cp.Client, Outputs: []output.Kind{output.KindSpiffeEntry},
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return h
}

// passUntilWithdrawn reconciles b with h until it owns no SpiffeEntry,
// for up to 10 s, and returns the last pass's error; why says what failed
// if it never is.
func passUntilWithdrawn(t *testing.T, h *identitybinding.Handler, c client.Client, b *v1alpha1.IdentityBinding, why func(last error) string) error {
	t.Helper()
	var last error
	NewWithT(t).Eventually(func() int {
		last = reconcile(t, h, c, b)
		return entriesOf(t, b)
	}, 10*time.Second, 50*time.Millisecond).Should(BeZero(), func() string { return why(last) })
	return last
}
