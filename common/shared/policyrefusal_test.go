package shared_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/shared"
	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("Writer release refused by an admission policy", func() {
	ours := shared.Writer{FieldManager: "trustplane-test"}
	theirs := shared.Writer{FieldManager: "someone-else"}
	BeforeEach(func() { ours.Client, theirs.Client = cp.Client, cp.Client })

	It("is a failure to retry, not an object left in place for good", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "mutable", map[string]any{"theirs": "x"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "mutable", map[string]any{"ca": "ours"}), false)).To(Succeed())

		By("an administrator's change freeze on ConfigMaps of the namespace (a ValidatingAdmissionPolicy)")
		denyConfigMapWrites(ctx, "freeze-"+ns, ns, testenv.Refusal{Expression: "false", Message: "change freeze until Monday"}, "UPDATE")
		waitRefusing(ctx, theirs, ns)

		_, err := ours.Release(ctx, metadataOf(ctx, ns, "mutable"))
		Expect(err).To(HaveOccurred())
		GinkgoWriter.Printf("release error: %v (Invalid: %v)\n", err, apierrors.IsInvalid(err))

		Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeFalse(),
			"a refusal by a policy that is lifted later was classed as an object the API server refuses without our fields: %v", err)
	})
})

// The writer's own policies (Writer.Policies) refuse a release only for
// what another writer put in the object, which no retry changes: such an
// object is left in place, as one the field validation refuses, so that
// whoever may edit one object cannot hold up the release of the others or
// the deletion of their owner.
var _ = Describe("Writer release refused by one of its own admission policies", func() {
	It("is left in place, both the empty apply of a shared object and the delete of one only it writes", func(ctx context.Context) {
		ns, own, ours, theirs := writersWithOwnPolicy(ctx)
		Expect(theirs.Apply(ctx, configMap(ns, "shared", map[string]any{"theirs": "x"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "shared", map[string]any{"ca": "ours"}), false)).To(Succeed())
		Expect(ours.Apply(ctx, configMap(ns, "sole", map[string]any{"ca": "ours"}), false)).To(Succeed())

		denyConfigMapWrites(ctx, own, ns, testenv.Refusal{Expression: "false", Message: "the object holds what the writer may not leave",
			Reason: string(metav1.StatusReasonForbidden)}, "UPDATE", "DELETE")
		waitRefusing(ctx, theirs, ns)

		for _, name := range []string{"shared", "sole"} {
			m := metadataOf(ctx, ns, name)
			_, err := ours.Release(ctx, m)
			Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeTrue(), "%s: got %v", name, err)
			Expect(err).To(MatchError(ContainSubstring("the object holds what the writer may not leave")), "the policy's reason is kept")
			Expect(metadataOf(ctx, ns, name).ResourceVersion).To(Equal(m.ResourceVersion), "%s was changed", name)
		}

		By("a refusal by a policy that is not the writer's stays a failure to retry")
		other := shared.Writer{Client: cp.Client, FieldManager: "trustplane-test", Policies: []string{"another-policy"}}
		_, err := other.Release(ctx, metadataOf(ctx, ns, "shared"))
		Expect(err).To(HaveOccurred())
		Expect(errors.Is(err, shared.ErrLeftInPlace)).To(BeFalse(), "got %v", err)
	})
})

// writersWithOwnPolicy returns a fresh namespace, the name of an admission
// policy of the writer ours (which names it in Policies), and another
// writer theirs.
func writersWithOwnPolicy(ctx context.Context) (ns, own string, ours, theirs shared.Writer) {
	ns = cp.Namespace(ctx)
	own = "own-" + ns
	ours = shared.Writer{Client: cp.Client, FieldManager: "trustplane-test", Policies: []string{own}}
	theirs = shared.Writer{Client: cp.Client, FieldManager: "someone-else"}
	return ns, own, ours, theirs
}

// waitRefusing waits until a policy refuses w's updates of ConfigMaps in ns:
// the API server applies a new policy a moment after its creation.
func waitRefusing(ctx context.Context, w shared.Writer, ns string) {
	Expect(w.Apply(ctx, configMap(ns, "probe", map[string]any{"n": "0"}), false)).To(Succeed())
	Expect(testenv.UntilRefused(ctx, 20*time.Second, "denied request", func(n int) error {
		return w.Apply(ctx, configMap(ns, "probe", map[string]any{"n": fmt.Sprint(n)}), false)
	})).To(Succeed(), "the policy never took effect")
}

// denyConfigMapWrites refuses the ops (UPDATE, DELETE) on ConfigMaps of
// namespace ns by policy name, words the refusal as r does (its Name,
// Resource, Operations and Namespace are set here), and lifts it at the
// end of the spec.
func denyConfigMapWrites(ctx context.Context, name, ns string, r testenv.Refusal, ops ...string) {
	r.Name, r.Resource, r.Operations, r.Namespace = name, "configmaps", ops, ns
	created, err := testenv.RefuseWrites(ctx, cp.Client, r)
	DeferCleanup(func(ctx context.Context) {
		for _, obj := range created {
			_ = cp.Client.Delete(ctx, obj)
		}
	})
	Expect(err).NotTo(HaveOccurred())
}

func ptrTo[T any](v T) *T { return &v }
