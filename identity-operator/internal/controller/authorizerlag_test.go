package controller_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// The operator's role may not update SpiffeEntries, and for 3 s after the
// first review the reviews are answered by an authorizer that already
// allows it (API servers whose authorizers disagree). A binding's spec
// changes: the update is refused by the role, the review says "allowed",
// and the write sent again after it is refused too, so the refusal reads
// as admission's. The operator keeps the SpiffeEntry until such a refusal
// has stood for its withdrawal retry (5 s here, past the lag); the passes
// that come meanwhile (the binding is queued again at once; a tenant may
// annotate its Deployment) do not withdraw it, and the first pass after
// the lag sees the role's refusal for what it is.
var _ = Describe("An authorizer lagging behind the review", func() {
	It("keeps the SpiffeEntry through a tenant's Deployment event during the lag", func(ctx SpecContext) {
		lagRun(ctx, true)
	}, SpecTimeout(2*time.Minute))

	It("keeps the SpiffeEntry with no event during the lag", func(ctx SpecContext) {
		lagRun(ctx, false)
	}, SpecTimeout(2*time.Minute))
})

// lagRun runs the lag; touch has the tenant annotate its Deployment
// during the lag.
func lagRun(ctx context.Context, touch bool) {
	GinkgoHelper()
	const spiffeEntryRule = "  - spiffeentries\n  verbs:\n  - create\n  - delete\n  - get\n  - list\n  - patch\n  - update\n  - watch\n"
	roleFile := roleEdited(spiffeEntryRule, "  - spiffeentries\n  verbs:\n  - create\n  - delete\n  - get\n  - list\n  - watch\n")
	lcp := startLateCRDControlPlane()
	access, err := lcp.AsServiceAccount(ctx, operatorNamespace, operatorSA, roleFile)
	Expect(err).NotTo(HaveOccurred())
	cfg := rest.CopyConfig(access.Config)
	var (
		mu       sync.Mutex
		lagUntil time.Time
		reviews  atomic.Int32
		sent     []time.Time
	)
	at := func() {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, time.Now())
	}
	gaps := func() string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for i := 1; i < len(sent); i++ {
			out = append(out, sent[i].Sub(sent[i-1]).Round(time.Millisecond).String())
		}
		return fmt.Sprintf("%d reviews, %v apart; the first pass asked for a retry in 5s", len(sent), out)
	}
	lagging := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if lagUntil.IsZero() {
			lagUntil = time.Now().Add(3 * time.Second)
		}
		return time.Now().Before(lagUntil)
	}
	testenv.TamperReviews(cfg, func() testenv.ReviewTamper {
		reviews.Add(1)
		at()
		if lagging() {
			return testenv.ReviewAllowed
		}
		return testenv.ReviewAsAnswered
	})
	fw := config.Default()
	fw.DefaultEnvironment = environment
	startLateCRDOperator(lcp, cfg, fw, 5*time.Second)
	r := &poolVerbsRun{ctx: ctx, lcp: lcp, c: lcp.Client, ns: "pool-verbs", roleName: roleName(roleFile)}
	Expect(r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}})).To(Succeed())

	uid, entryUID := r.readyEntry("web")

	By("changing the spec: the update is forbidden by the role, and the review lags")
	r.setHint("web", "changed")
	Eventually(reviews.Load).WithTimeout(30 * time.Second).WithPolling(5 * time.Millisecond).Should(BeNumerically(">=", 1))

	if touch {
		By("the tenant annotating its Deployment during the lag")
		d := &appsv1.Deployment{}
		Expect(r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "web"}, d)).To(Succeed())
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations["tenant/touch"] = time.Now().String()
		Expect(r.c.Update(ctx, d)).To(Succeed())
	}

	Consistently(entryUID).WithTimeout(8*time.Second).WithPolling(100*time.Millisecond).Should(Equal(uid),
		func() string { return "a refusal by the operator's own role withdrew the SpiffeEntry: " + gaps() })
	By("after the lag, the binding says what to grant")
	Eventually(r.reason("web")).WithTimeout(30 * time.Second).Should(Equal(v1alpha1.ReasonOperatorForbidden))
	Expect(entryUID(Default)).To(Equal(uid))
}
