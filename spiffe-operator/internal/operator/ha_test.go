package operator_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

var _ = Describe("SPIRE in HA", func() {
	It("keeps converging through the other server when one is killed: the entry of a new workload appears and Ready never leaves True; "+
		"a server killed in the middle of a pass leaves every entry written once", func() {
		ha, err := testenv.StartSpireHA(testenv.SpireOptions{TrustDomain: trustDomain, LogLevel: "INFO"}, 2)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(ha.Logs())
			}
			Expect(ha.Cleanup()).To(Succeed())
		})
		// A cluster of its own, so that the suite's operator (on another
		// SPIRE) does not take the policy.
		scheme, err := operator.Scheme()
		Expect(err).NotTo(HaveOccurred())
		cp2, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{
			CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
			Scheme:            scheme,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(cp2.Stop()).To(Succeed()) })
		_, stopHA := launch(cp2.Config, func(o *operator.Options) {
			o.Connect = spireconn.Options{SocketPath: strings.Join(ha.SocketPaths(), ",")}
		})
		DeferCleanup(stopHA)

		// What SPIRE holds, read through whichever server is up.
		conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: strings.Join(ha.SocketPaths(), ",")})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(closer.Close)
		reader := spire.NewClient(conn, spire.Options{})
		held := func() []string {
			list, err := reader.ListByParent(ctx, spiffeid.RequireFromString(parentOf("ha")))
			Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, e := range list {
				out = append(out, e.SpiffeId.Path)
			}
			sort.Strings(out)
			return out
		}

		k2 := cp2.Client
		Expect(k2.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha-a", Labels: map[string]string{"test": "ha"}}})).To(Succeed())
		policy := policyFor("ha", nil)
		Expect(k2.Create(ctx, policy)).To(Succeed())
		deploymentIn(k2, "ha-a", "before", "before", nil)
		Eventually(held).Should(Equal([]string{"/ns/ha-a/sa/before"}))
		ready := func() *metav1.Condition {
			Expect(k2.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
			return meta.FindStatusCondition(policy.Status.Conditions, "Ready")
		}
		Eventually(func() metav1.ConditionStatus { return ready().Status }).Should(Equal(metav1.ConditionTrue))
		since := ready().LastTransitionTime

		Expect(ha.Servers[0].Kill()).To(Succeed())
		deploymentIn(k2, "ha-a", "after", "after", nil)
		Eventually(held).Should(Equal([]string{"/ns/ha-a/sa/after", "/ns/ha-a/sa/before"}))
		Consistently(held).Should(Equal([]string{"/ns/ha-a/sa/after", "/ns/ha-a/sa/before"}))
		Eventually(func() int32 {
			ready()
			return policy.Status.EntriesRegistered
		}).Should(BeEquivalentTo(2))
		c := ready()
		Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		Expect(c.LastTransitionTime).To(Equal(since), "Ready never left True")

		By("the other server killed in the middle of a pass of many writes")
		Expect(ha.Servers[0].Restart()).To(Succeed())
		const many = 400
		Expect(k2.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha-b", Labels: map[string]string{"test": "ha"}}})).To(Succeed())
		want := []string{"/ns/ha-a/sa/after", "/ns/ha-a/sa/before"}
		for i := range many {
			sa := fmt.Sprintf("w-%03d", i)
			deploymentIn(k2, "ha-b", sa, sa, nil)
			want = append(want, "/ns/ha-b/sa/"+sa)
		}
		sort.Strings(want)
		Eventually(func() int { return len(held()) }).WithPolling(20 * time.Millisecond).Should(BeNumerically(">", 2))
		Expect(ha.Servers[1].Kill()).To(Succeed())
		atKill := len(held())
		GinkgoWriter.Printf("server killed with %d of %d entries written\n", atKill, len(want))
		Expect(atKill).To(BeNumerically("<", len(want)), "the kill lands in the middle of the pass")
		Eventually(held).WithTimeout(time.Minute).Should(Equal(want), "every entry once, none twice")
		Eventually(func() metav1.ConditionStatus { return ready().Status }).Should(Equal(metav1.ConditionTrue))
		Consistently(held).Should(Equal(want))
	})
})
