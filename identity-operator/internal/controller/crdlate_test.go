package controller_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	ibcontroller "github.com/trustplane/trustplane/identity-operator/internal/controller"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
	"github.com/trustplane/trustplane/identity-operator/internal/setup"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

// This spec needs an API server without the InferencePool CRD at operator
// startup, so it starts its own control plane (the suite's has the CRD).
// Every timed requeue is pushed an hour away (resync, error backoff, the
// InferencePoolCRDMissing retry), and before each change the spec waits until
// the operator is idle, so each later step can only happen through the CRD
// watcher: the requeue when it finds the CRD, then the events of the
// InferencePool watch it adds to the running controller. (Without the
// watcher, or without its InferencePool watch, or with pool update events
// filtered out, the spec fails at the matching step; the requeue when the
// CRD appears comes from both the watcher and the CRD monitor.) Then the
// CRD stops serving v1 and serves it again while the operator runs: only
// the CRD monitor can tell, and without it the spec fails there.
var _ = Describe("InferencePool CRD installed after startup: pools are watched without a restart", func() {
	It("reports InferencePoolCRDMissing, then converges and follows pool changes once the CRD is installed", func(ctx SpecContext) {
		crdFiles := inferencePoolCRDFiles()
		lcp := startLateCRDControlPlane()
		c := lcp.Client
		fw := config.Default()
		fw.DefaultEnvironment = environment
		// No timed requeue: the status-write conflicts that a stale cache
		// causes are followed by the event of the newer object anyway.
		fw.RequeueAfter = time.Hour
		fw.RequeueAfterOnError = time.Hour
		fw.MaxBackoff = time.Hour
		startLateCRDOperator(lcp, installOperatorRBAC(ctx, lcp), fw, 0)

		ns := "late-crd"
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		b := &v1alpha1.IdentityBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
			Spec: v1alpha1.IdentityBindingSpec{
				PoolRef:            v1alpha1.PoolReference{Name: "llm"},
				ServiceAccountName: "serving",
				IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: "v1"},
			},
		}
		Expect(c.Create(ctx, b)).To(Succeed())
		key := client.ObjectKeyFromObject(b)
		getBinding := func(g Gomega) *v1alpha1.IdentityBinding {
			got := &v1alpha1.IdentityBinding{}
			g.Expect(c.Get(ctx, key, got)).To(Succeed())
			return got
		}
		readyReason := func(g Gomega) string { return readyReasonOf(getBinding(g)) }
		entrySelectors := func(g Gomega) []string {
			e := &spiffev1alpha1.SpiffeEntry{}
			g.Expect(c.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, e)).To(Succeed())
			return e.Spec.Selectors
		}

		// reconciles counts the operator's finished reconciles.
		reconciles := func(g Gomega) float64 {
			n, err := testsupport.Reconciles(ctrlmetrics.Registry, ibcontroller.Name)
			g.Expect(err).NotTo(HaveOccurred())
			return n
		}
		// settle waits until the operator has been idle for a second, so that
		// no reconcile its own writes triggered (they may read a stale cache
		// and conflict) is still running when the next step changes the
		// world: that reconcile could otherwise explain the next outcome.
		settle := func() {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				n := reconciles(g)
				g.Consistently(reconciles).WithTimeout(time.Second).WithPolling(50 * time.Millisecond).Should(Equal(n))
			}).Should(Succeed())
		}

		By("reporting InferencePoolCRDMissing while the CRD is not installed")
		Eventually(readyReason).Should(Equal(v1alpha1.ReasonInferencePoolCRDMissing))
		settle()
		Expect(readyReason(Default)).To(Equal(v1alpha1.ReasonInferencePoolCRDMissing))

		By("installing the InferencePool CRD")
		_, err := envtest.InstallCRDs(lcp.Config, envtest.CRDInstallOptions{Paths: crdFiles, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())

		By("requeueing the binding when the operator notices the CRD: its pool does not exist yet")
		Eventually(readyReason).Should(Equal(v1alpha1.ReasonTargetPoolNotFound))
		settle()

		By("creating the pool: its add event reaches the operator through the new watch")
		Eventually(func() error { return c.Create(ctx, inferencePool(ns, "llm", map[string]any{"app": "llm"})) }).
			WithContext(ctx).Should(Succeed())
		Eventually(readyReason).Should(Equal("True"))
		Expect(entrySelectors(Default)).To(ContainElement("k8s:pod-label:app:llm"))
		settle()

		By("changing the pool's selector: the live watch requeues the binding again")
		Eventually(func(g Gomega) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(pool.InferencePoolGVK())
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llm"}, u)).To(Succeed())
			g.Expect(unstructured.SetNestedStringMap(u.Object, map[string]string{"app": "llm-v2"}, "spec", "selector", "matchLabels")).To(Succeed())
			g.Expect(c.Update(ctx, u)).To(Succeed())
		}).Should(Succeed())
		Eventually(entrySelectors).Should(And(
			ContainElement("k8s:pod-label:app:llm-v2"), Not(ContainElement("k8s:pod-label:app:llm"))))
		Eventually(func(g Gomega) []string { return getBinding(g).Status.Selectors }).
			Should(ContainElement("k8s:pod-label:app:llm-v2"))
		settle()

		// The REST mapper keeps the v1 mapping it learned and the informer
		// the pools it listed: only the CRD monitor can tell the operator.
		setV1Served := func(served bool) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				crd := &unstructured.Unstructured{}
				crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
				g.Expect(c.Get(ctx, client.ObjectKey{Name: pool.InferencePoolCRDName}, crd)).To(Succeed())
				versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
				g.Expect(err).NotTo(HaveOccurred())
				var kept []any
				for _, v := range versions {
					v := v.(map[string]any)
					switch v["name"] {
					case "v1":
						v["served"] = served
						kept = append(kept, v)
					case "v1alpha2":
					default:
						kept = append(kept, v)
					}
				}
				if !served {
					older := map[string]any{}
					for k, val := range kept[0].(map[string]any) {
						older[k] = val
					}
					older["name"], older["served"], older["storage"] = "v1alpha2", true, false
					kept = append(kept, older)
				}
				g.Expect(unstructured.SetNestedSlice(crd.Object, kept, "spec", "versions")).To(Succeed())
				g.Expect(c.Update(ctx, crd)).To(Succeed())
			}).Should(Succeed())
		}
		entryGone := func(g Gomega) bool {
			err := c.Get(ctx, client.ObjectKey{Name: output.Name(ns, b.Name)}, &spiffev1alpha1.SpiffeEntry{})
			return apierrors.IsNotFound(err)
		}

		By("making the CRD stop serving v1 while the operator runs: the binding withdraws its output")
		setV1Served(false)
		Eventually(readyReason).Should(Equal(v1alpha1.ReasonInferencePoolCRDMissing))
		Eventually(entryGone).Should(BeTrue())
		Expect(getBinding(Default).Status.Outputs).To(BeEmpty())
		settle()

		By("serving v1 again: the binding recovers its output without a restart")
		setV1Served(true)
		Eventually(readyReason).Should(Equal("True"))
		Eventually(entrySelectors).Should(ContainElement("k8s:pod-label:app:llm-v2"))
	}, SpecTimeout(2*time.Minute))
})

// startLateCRDControlPlane starts a control plane of the spec's own with the
// operator's CRDs but without the InferencePool CRD (the suite's has it),
// stopped after the spec.
func startLateCRDControlPlane() *testenv.ControlPlane {
	GinkgoHelper()
	lcp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{CRDDirectoryPaths: testsupport.OwnCRDs(), Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(lcp.Stop()).To(Succeed()) })
	return lcp
}

// startLateCRDOperator starts the operator on lcp as access (the operator's
// service account), with framework settings fw, a withdrawal retry of
// withdrawalRetry (200 ms if zero), a CRD-missing retry an hour away and
// the CRD watcher polling every 200 ms; it stops before lcp.
func startLateCRDOperator(lcp *testenv.ControlPlane, access *rest.Config, fw config.Config, withdrawalRetry time.Duration) {
	GinkgoHelper()
	if withdrawalRetry == 0 {
		withdrawalRetry = 200 * time.Millisecond
	}
	td := spiffeid.RequireTrustDomainFromString(trustDomain)
	outputs := []output.Kind{output.KindSpiffeEntry}
	s := setup.Settings{
		Framework:   fw,
		TrustDomain: td,
		ParentID:    parentID,
		Outputs:     outputs,
		// Reentrant: the suite's manager already uses the controller name.
		Manager: manager.Options{MetricsAddr: "0", ProbeAddr: "0", Reentrant: true},
		Handler: identitybinding.Options{
			TrustDomain:     td,
			ParentID:        parentID,
			Outputs:         outputs,
			WithdrawalRetry: withdrawalRetry,
			CRDMissingRetry: time.Hour,
		},
		CRDPollInterval: 200 * time.Millisecond,
	}
	mgr, err := ctrl.NewManager(access, setup.ManagerOptions(s, scheme))
	Expect(err).NotTo(HaveOccurred())
	mctx, stop := context.WithCancel(context.Background())
	Expect(setup.Register(mctx, mgr, s, prometheus.NewRegistry())).To(Succeed())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	// Cleanups run last-in first-out: the operator stops before its API server.
	DeferCleanup(func() {
		stop()
		Eventually(done).Should(BeClosed())
	})
}

// inferencePoolCRDFiles returns the InferencePool CRD's manifest.
func inferencePoolCRDFiles() []string {
	GinkgoHelper()
	external, err := testsupport.ExternalCRDs()
	Expect(err).NotTo(HaveOccurred())
	var crdFiles []string
	for _, f := range external {
		if strings.Contains(f, "inferencepools") {
			crdFiles = append(crdFiles, f)
		}
	}
	Expect(crdFiles).To(HaveLen(1))
	return crdFiles
}
