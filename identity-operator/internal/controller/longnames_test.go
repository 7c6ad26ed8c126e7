package controller_test

import (
	"context"
	"maps"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/identity-operator/internal/index"
)

var _ = Describe("Outputs of a binding whose name is longer than a label value", func() {
	It("are swept like any other once the binding is gone", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		name := "long-" + strings.Repeat("n", 70) // a valid object name, longer than the 63 characters of a label value
		createBinding(ctx, ns, name, "serving", "v1")
		Eventually(readyReason(ctx, ns, name)).Should(Equal("True"))
		written := getEntry(ctx, ns, name)(Default)

		Expect(written.Annotations).To(HaveKeyWithValue(labels.OwnerNameAnnotation, name),
			"a name too long for a label is kept in an annotation")

		By("an output carrying exactly the labels and annotations the operator wrote for that binding, of a binding of that name that is gone")
		l := maps.Clone(written.Labels)
		Expect(l).To(HaveKeyWithValue(labels.OwnerKind, "IdentityBinding"))
		Expect(l).To(HaveKeyWithValue(labels.OwnerNamespace, ns))
		Expect(l).To(HaveKey(index.LabelGroup))
		l[labels.OwnerUID] = "uid-of-a-deleted-binding"
		orphan := orphanEntry("orphan-long-"+ns, l)
		orphan.Annotations = maps.Clone(written.Annotations)
		Expect(k8s.Create(ctx, orphan)).To(Succeed())

		Eventually(gone(ctx, orphan), 10*time.Second).Should(BeTrue(),
			"the output of a binding that is gone was not swept (its labels: %v, annotations: %v)", l, orphan.Annotations)

		By("the binding itself is swept of nothing while it exists")
		Consistently(getEntry(ctx, ns, name), 2*time.Second).ShouldNot(BeNil())
	}, SpecTimeout(time.Minute))
})
